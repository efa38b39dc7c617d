"""/agents/: create, clone, edit and delete profiles, with each error under its field."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agentweb.accounts.roles import ensure_roles
from agentweb.runs.models import AgentProfile, AuditEntry, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin() -> Client:
    groups = ensure_roles()
    user = User.objects.create_user("admin", password="pw-123456789")
    user.groups.add(groups["admin"])
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator() -> Client:
    groups = ensure_roles()
    user = User.objects.create_user("operator", password="pw-123456789")
    user.groups.add(groups["operator"])
    client = Client()
    client.force_login(user)
    return client


def form(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "helper",
        "description": "Short answers",
        "model": "",
        "system_prompt": "Be brief.",
        "allowed_tools": '["get_order", "search_kb"]',
        "tool_selection": "all",
        "validator": "",
        "max_iterations": 5,
        "risk_overrides": "{}",
        "approval_policies": "{}",
        "delegates": "[]",
        "context_budget_tokens": 8000,
        "vision": "on",
    }
    data.update(overrides)
    return data


def test_an_admin_creates_a_profile_in_the_browser(admin: Client) -> None:
    page = admin.get("/agents/new/")
    assert page.status_code == 200 and 'name="validator"' in page.content.decode()
    # A new profile's form starts with the model's defaults.
    shown = page.content.decode()
    assert 'name="max_iterations" value="20"' in shown, shown
    assert 'name="context_budget_tokens" value="16000"' in shown
    assert 'name="tool_selection" value="all"' in shown and 'name="vision"' in shown
    response = admin.post("/agents/new/", form(tool_selection="4"))
    assert response.status_code == 302
    made = AgentProfile.objects.get(name="helper")
    assert made.allowed_tools == ["get_order", "search_kb"] and made.top_n == 4
    assert made.validator == "" and made.vision is True
    assert AuditEntry.objects.filter(action="agent_profile_created").exists()
    listing = admin.get("/agents/").content.decode()
    assert 'id="agent-helper"' in listing and "top 4 + search_tools" in listing


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("allowed_tools", '["get_order", "launch_rocket"]', "launch_rocket"),
        ("validator", "agentweb.nowhere.check", "cannot use agentweb.nowhere.check"),
        ("model", "mistral:large", "mistral:large"),
        ("tool_selection", "lots", "a whole number"),
        ("delegates", '["ghost"]', "ghost"),
        ("approval_policies", '{"get_order": "sometimes"}', "always"),
        # DESIGN 16: what the page used to save without a word
        (
            "approval_policies",
            '{"issue_refund": {"argument": "amountx", "at_least": 20}}',
            "issue_refund has no argument 'amountx' (its arguments: ",
        ),
        (
            "approval_policies",
            '{"issue_refund": {"argument": "amount", "at_least": 20, "sum_per": "order"}}',
            "has no argument 'order'",
        ),
        ("system_prompt", "Help {{usr}} with the ticket.", "{{usr}} is not a variable"),
        ("system_prompt", "Hi.\nThe ticket: {{ticket\nBe brief.", "line 2: '{{ticket' is not"),
        ("system_prompt", "The {{ Ticket }}.", "{{Ticket}} is not a variable"),
        ("max_iterations", "0", "must be from 1 to 200"),
    ],
)
def test_an_error_shows_under_its_field(admin: Client, field: str, value: str, words: str) -> None:
    response = admin.post("/agents/new/", form(**{field: value}))
    assert response.status_code == 422  # the form again, with the error
    body = response.content.decode()
    start = body.index(f'id="field-{field}"')
    block = body[start : body.index('<div class="field', start + 10)]
    assert "has-error" in body[start - 40 : start + 40] or 'class="error"' in block
    assert 'class="error"' in block and words in block.replace("&#x27;", "'").replace("&quot;", '"')
    assert not AgentProfile.objects.filter(name="helper").exists()
    # ... and a summary at the top of the form links to it
    summary = body[body.index('id="form-errors"') : body.index('id="field-name"')]
    assert f'href="#field-{field}"' in summary, summary


def test_every_refused_field_is_in_the_summary_at_the_top(admin: Client) -> None:
    response = admin.post(
        "/agents/new/", form(system_prompt="{{usr}}", max_iterations="0", tool_selection="x")
    )
    body = response.content.decode()
    summary = body[body.index('id="form-errors"') : body.index('id="field-name"')]
    assert "Not saved: 3 problems." in summary
    for field in ("system_prompt", "max_iterations", "tool_selection"):
        assert f'href="#field-{field}"' in summary


def test_a_prompt_with_every_variable_and_a_known_policy_argument_are_saved(
    admin: Client,
) -> None:
    prompt = "For {{user}} at {{ now }}: {{ticket}} #{{ticket_id}} {{customer}} "
    prompt += "{{customer_id}} with {{tools}}."
    policy = '{"issue_refund": {"argument": "amount", "at_least": 20, "sum_per": "order_id"}}'
    response = admin.post(
        "/agents/new/",
        form(system_prompt=prompt, approval_policies=policy, allowed_tools='["issue_refund"]'),
    )
    assert response.status_code == 302, response.content.decode()
    made = AgentProfile.objects.get(name="helper")
    assert made.system_prompt == prompt and made.approval_policies["issue_refund"]["at_least"] == 20


def test_every_problem_of_a_prompt_is_said_at_once() -> None:
    from agentweb.runs.prompts import VARIABLES, template_problem

    said = template_problem("Hi {{usr}}.\nThe ticket: {{ticket\n")
    assert said is not None and said.startswith(
        "line 1: {{usr}} is not a variable; line 2: '{{ticket' is not closed with }}"
    )
    assert template_problem("{{ user }} {{ticket}}") is None
    assert template_problem("".join("{{" + v + "}}" for v in VARIABLES)) is None
    crlf = template_problem("Hi.\r\nThe ticket: {{ticket\r\nBe brief.")  # as forms post
    assert crlf == "line 2: '{{ticket' is not closed with }}"


def test_the_prompt_field_names_every_variable(admin: Client) -> None:
    from agentweb.runs.prompts import VARIABLES

    body = admin.get("/agents/new/").content.decode()
    field = body.split('id="field-system_prompt"')[1].split("</label>")[1][:600]
    assert all("{{" + v + "}}" in field for v in VARIABLES), field


def test_a_stored_prompt_keeps_a_name_it_already_had(admin: Client) -> None:
    # Stored before the check: saving it again (or `agents import` of its export) works.
    stored = AgentProfile.objects.create(name="helper", system_prompt="Hi {{usr}}.", validator="")
    url = f"/agents/{stored.pk}/"
    kept = admin.post(url, form(system_prompt="Hello {{usr}}."))
    assert kept.status_code == 302, kept.content.decode()
    new = admin.post(url, form(system_prompt="Hello {{usr}} {{whom}}."))
    assert new.status_code == 422 and "{{whom}} is not a variable" in new.content.decode()


def test_clone_prefills_a_copy_under_a_new_name(admin: Client) -> None:
    AgentProfile.objects.create(
        name="helper", system_prompt="Be brief.", validator="", tool_selection="6"
    )
    page = admin.get("/agents/new/?clone=helper").content.decode()
    assert 'value="helper-copy"' in page and "Be brief." in page
    response = admin.post("/agents/new/", form(name="helper-copy", clone="helper"))
    assert response.status_code == 302
    assert AgentProfile.objects.filter(name__in=["helper", "helper-copy"]).count() == 2
    entry = AuditEntry.objects.get(action="agent_profile_created")
    assert entry.data["cloned_from"] == "helper"


def test_edit_keeps_the_name_and_saves_the_fields(admin: Client) -> None:
    profile = AgentProfile.objects.create(name="helper", system_prompt="Be brief.")
    response = admin.post(f"/agents/{profile.pk}/", form(name="renamed", validator=""))
    assert response.status_code == 302
    profile.refresh_from_db()
    assert profile.name == "helper" and profile.max_iterations == 5


def test_delete_an_unused_profile_and_refuse_one_with_runs(admin: Client) -> None:
    unused = AgentProfile.objects.create(name="unused", system_prompt="p")
    assert admin.get(f"/agents/{unused.pk}/delete/").status_code == 405
    assert admin.post(f"/agents/{unused.pk}/delete/").status_code == 302
    assert not AgentProfile.objects.filter(name="unused").exists()
    used = AgentProfile.objects.create(name="used", system_prompt="p")
    Run.objects.create(task="t", agent=used, created_by=User.objects.get(username="admin"))
    response = admin.post(f"/agents/{used.pk}/delete/", follow=True)
    assert AgentProfile.objects.filter(name="used").exists()
    assert "Not deleted: used has 1 run" in response.content.decode()


def test_operators_cannot_create_or_delete(operator: Client) -> None:
    profile = AgentProfile.objects.create(name="helper", system_prompt="p")
    assert operator.get("/agents/new/").status_code == 403
    assert operator.post("/agents/new/", form(name="x")).status_code == 403
    assert operator.post(f"/agents/{profile.pk}/delete/").status_code == 403
    assert AgentProfile.objects.filter(name="helper").exists()


def test_model_text_in_a_profile_is_escaped(admin: Client) -> None:
    AgentProfile.objects.create(
        name="x", system_prompt="p", description="<script>alert(1)</script>"
    )
    body = admin.get("/agents/").content.decode()
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;" in body


def test_an_objection_shows_on_the_run_page_and_in_replay(admin: Client) -> None:
    from tests.web import factories as f

    user = User.objects.get(username="admin")
    run = f.make_run(user)
    reason = "Your answer says a <refund> happened, but the shop does not show it."
    f.emit(
        run,
        f.model_called(text="I refunded it.", tool=""),
        {
            "type": "completion_objected",
            "data": {"validator": "agentweb.shop.validators.claims_validator", "reason": reason},
        },
        f.model_called(text="No refund was made.", tool=""),
        {"type": "run_finished", "data": {"final_answer": "No refund was made."}},
        status=Run.Status.SUCCEEDED,
    )
    seq = run.events.get(type="completion_objected").seq
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/replay/"):
        body = admin.get(url).content.decode()
        item = body[body.index(f'id="event-{seq}"') :]
        item = item[: item.index("</li>")]
        assert "Answer sent back" in item
        assert "agentweb.shop.validators.claims_validator" in item
        assert "a &lt;refund&gt; happened" in item  # escaped: validator text is data
    replay = admin.get(f"/runs/{run.pk}/replay/").content.decode()
    assert "validator · agentweb.shop.validators.claims_validator" in replay


# --- the tool rows and the delegate picker (DESIGN 16, issue 26.6) ---------------------------


def rows(**overrides: Any) -> dict[str, Any]:
    """What the page posts: a row per tool and the delegate picker, no JSON text."""
    data = {
        k: v
        for k, v in form().items()
        if k not in ("allowed_tools", "risk_overrides", "approval_policies", "delegates")
    }
    data.update(tool_rows="1", delegate_rows="1", tool_row=["get_order", "issue_refund"])
    data.update(overrides)
    return data


def test_the_form_shows_a_row_per_registered_tool_and_the_other_profiles(admin: Client) -> None:
    AgentProfile.objects.create(name="billing", system_prompt="Bill.", description="Refunds")
    body = admin.get("/agents/new/").content.decode()
    assert 'name="tool_rows" value="1"' in body and 'id="tool-rows"' in body
    for name in ("get_order", "issue_refund", "search_kb"):
        assert f'id="tool-row-{name}"' in body and f'name="tool_allowed" value="{name}"' in body
    refund = body.split('id="tool-row-issue_refund"')[1].split("</tr>")[0]
    assert (
        '<option value="amount">' in refund and '<option value="amount">amount</option>' in refund
    )
    assert 'name="delegate" value="billing"' in body and "Refunds" in body
    assert 'name="allowed_tools"' not in body and 'name="approval_policies"' not in body


def test_rows_save_tools_risks_policies_and_delegates(admin: Client) -> None:
    AgentProfile.objects.create(name="billing", system_prompt="Bill.")
    response = admin.post(
        "/agents/new/",
        rows(
            tool_allowed=["get_order", "issue_refund"],
            **{
                "risk__get_order": "medium",
                "policy__issue_refund": "amount",
                "policy_argument__issue_refund": "amount",
                "policy_at_least__issue_refund": "20",
                "policy_sum_per__issue_refund": "order_id",
                "policy_approvers__issue_refund": "2",
                "policy__get_order": "always",
            },
            delegate=["billing"],
        ),
    )
    assert response.status_code == 302, response.content.decode()
    made = AgentProfile.objects.get(name="helper")
    assert made.allowed_tools == ["get_order", "issue_refund"]
    assert made.risk_overrides == {"get_order": "medium"}
    assert made.approval_policies == {
        "issue_refund": {
            "argument": "amount",
            "at_least": 20,
            "sum_per": "order_id",
            "approvers": 2,
        },
        "get_order": "always",
    }
    assert made.delegates == ["billing"]
    # the stored profile's page shows them as rows again
    page = admin.get(f"/agents/{made.pk}/").content.decode()
    refund = page.split('id="tool-row-issue_refund"')[1].split("</tr>")[0]
    assert 'value="issue_refund" id="allow-issue_refund" checked' in refund
    assert '<option value="amount" selected>' in refund and 'value="20"' in refund
    assert '<option value="order_id" selected>summed per order_id</option>' in refund
    assert 'name="delegate" value="billing" checked' in page
    # a custom rule stays as JSON; saving the page unchanged changes nothing
    made.approval_policies = {"issue_refund": {"approvers": 2, "escalate_after_minutes": 30}}
    made.save()
    page = admin.get(f"/agents/{made.pk}/").content.decode()
    refund = page.split('id="tool-row-issue_refund"')[1].split("</tr>")[0]
    assert '<option value="custom" selected>' in refund and "escalate_after_minutes" in refund


def test_a_row_refused_says_so_in_its_row_and_at_the_top(admin: Client) -> None:
    response = admin.post(
        "/agents/new/",
        rows(
            tool_allowed=["issue_refund"],
            **{
                "policy__issue_refund": "amount",
                "policy_argument__issue_refund": "amountx",
                "policy_at_least__issue_refund": "20",
            },
        ),
    )
    assert response.status_code == 422
    body = response.content.decode().replace("&#x27;", "'")
    summary = body[body.index('id="form-errors"') : body.index('id="field-name"')]
    assert 'href="#field-approval_policies"' in summary and "no argument 'amountx'" in summary
    row = body.split('id="tool-row-issue_refund"')[1].split("</tr>")[0]
    assert "has-error" in body.split('id="tool-row-issue_refund"')[1][:40]
    assert "issue_refund has no argument 'amountx'" in row
    assert '<option value="amountx" selected>amountx (not an argument)</option>' in row
    # what was ticked and chosen is kept for the next try
    assert 'value="issue_refund" id="allow-issue_refund" checked' in row
    assert not AgentProfile.objects.filter(name="helper").exists()


def test_an_amount_rule_without_its_amount_is_refused(admin: Client) -> None:
    response = admin.post(
        "/agents/new/",
        rows(**{"policy__issue_refund": "amount", "policy_argument__issue_refund": "amount"}),
    )
    assert response.status_code == 422
    assert "issue_refund: an amount rule needs its argument" in response.content.decode()


def test_a_clone_starts_with_the_rows_and_delegates_of_its_source(admin: Client) -> None:
    AgentProfile.objects.create(name="billing", system_prompt="Bill.")
    AgentProfile.objects.create(
        name="helper",
        system_prompt="Be brief.",
        allowed_tools=["issue_refund"],
        risk_overrides={"get_order": "medium"},
        approval_policies={"issue_refund": {"argument": "amount", "at_least": 5}},
        delegates=["billing"],
    )
    page = admin.get("/agents/new/?clone=helper").content.decode()
    refund = page.split('id="tool-row-issue_refund"')[1].split("</tr>")[0]
    assert 'id="allow-issue_refund" checked' in refund and 'value="5"' in refund
    assert '<option value="amount" selected>' in refund
    order = page.split('id="tool-row-get_order"')[1].split("</tr>")[0]
    assert '<option value="medium" selected>' in order and "checked" not in order
    assert 'name="delegate" value="billing" checked' in page
