"""Approval cards: why a person is needed, Edit & approve as a form built from the tool's
schema with each error beside its field, and a reject that needs a reason (DESIGN §16)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agentweb.accounts.roles import ensure_roles
from agentweb.runs import actions, agents
from agentweb.runs.approval_why import asking_rule, explain
from agentweb.runs.models import AgentProfile, Approval, Run, ToolExecution
from agentweb.web import approval_form
from tests.shop.conftest import make_customer, make_order
from tests.web import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def people() -> dict[str, User]:
    groups = ensure_roles()
    users = {}
    for name in ("operator", "approver", "admin"):
        users[name] = User.objects.create_user(name, password="pw-123456789")
        users[name].groups.add(groups[name])
    return users


@pytest.fixture
def form_tools(settings: Any) -> Iterator[None]:
    settings.AGENTWEB_TOOLS = ["tools.ticket", "tests.web.form_tools"]
    agents.registry.cache_clear()
    yield
    agents.registry.cache_clear()


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def ask(run: Run, tool: str, arguments: dict[str, Any], **more: Any) -> Approval:
    """A pending approval of ``tool`` (an approval rule asked, unless ``reason`` says)."""
    return f.request_approval(run, tool=tool, arguments=arguments, **{"reason": "policy", **more})


def refund_waiting(people: dict[str, User]) -> Approval:
    """A refund of 20 on A1001, after 39 already refunded on it in another run."""
    earlier = f.make_run(people["admin"], task="An earlier refund", status="succeeded")
    ToolExecution.objects.create(
        run=earlier,
        call_id="e1",
        tool="issue_refund",
        arguments={"order_id": "A1001", "amount": 39, "reason": "late"},
        status=ToolExecution.Status.SUCCEEDED,
    )
    run = f.make_run(people["operator"], task="Teapot arrived cracked, refund <b>it</b>")
    return ask(
        run,
        "issue_refund",
        {"order_id": "A1001", "amount": 20, "reason": "damaged"},
        why="amount on order_id A1001 reaches 20 (total 59.00)",
    )


def html_of(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


# --- why -----------------------------------------------------------------------------------


def test_it_says_the_stored_why_the_rule_this_amount_and_the_total(people) -> None:
    approval = refund_waiting(people)
    why = explain(Approval.objects.select_related("run__agent").get(pk=approval.pk))
    assert why.why == "amount on order_id A1001 reaches 20 (total 59.00)"
    assert why.rule.kind == "tool_threshold"
    assert "issue_refund's own rule" in why.rule.text and "order_id" in why.rule.text
    assert (why.argument, why.amount, why.group, why.total) == (
        "amount",
        "20.00",
        "order_id A1001",
        "59.00",
    )
    lines = why.lines()  # what a mail or a Slack message says
    assert lines[0] == "Why: amount on order_id A1001 reaches 20 (total 59.00)"
    assert lines[1].startswith("Rule: issue_refund's own rule")
    assert "total so far on order_id A1001: 59.00 of 20" in lines[2]
    # Both pages say it, escaped.
    inbox = html_of(client_for(people["approver"]).get("/approvals/"))
    run_page = html_of(client_for(people["approver"]).get(f"/runs/{approval.run_id}/"))
    for page in (inbox, run_page):
        assert "amount on order_id A1001 reaches 20 (total 59.00)" in page
        assert "issue_refund&#x27;s own rule" in page
        assert re.search(r"total so far on order_id A1001:</span> <strong>59.00</strong>", page)


def test_a_total_that_grew_since_the_request_is_shown_as_it_is_now(people) -> None:
    approval = refund_waiting(people)
    other = f.make_run(people["admin"], task="another")
    ask(other, "issue_refund", {"order_id": " a1001 ", "amount": 5.5, "reason": "x"})
    why = explain(Approval.objects.select_related("run__agent").get(pk=approval.pk))
    assert why.total == "64.50"  # 39 executed + 20 this one + 5.50 pending elsewhere


@pytest.mark.parametrize(
    ("profile", "tool", "reason", "kind", "words"),
    [
        ({"approval_policies": {"cancel_order": "always"}}, "cancel_order", "policy",
         "profile_always", "asks a person for every cancel_order"),
        ({"approval_policies": {"issue_refund": {"argument": "amount", "at_least": 5}}},
         "issue_refund", "policy", "profile_threshold", "whose amount is 5 or more"),
        ({"risk_overrides": {"add_customer_note": "high"}}, "add_customer_note", "high_risk",
         "risk_override", "makes add_customer_note high risk"),
        ({}, "cancel_order", "high_risk", "high_risk", "cancel_order is a high-risk tool"),
        ({}, "cancel_order", "malformed_arguments", "malformed_arguments", "could not be read"),
        ({}, "cancel_order", "unknown_outcome", "unknown_outcome", "stopped mid-call"),
    ],
)  # fmt: skip
def test_the_rule_that_asked_in_words(profile, tool, reason, kind, words) -> None:
    agent = AgentProfile(name="p", system_prompt="x", **profile)
    rule = asking_rule(agent, tool, reason)
    assert rule.kind == kind
    assert words in rule.text


def test_a_profile_threshold_shows_this_amount_without_a_total(people) -> None:
    run = f.make_run(people["operator"])
    run.agent.approval_policies = {"issue_refund": {"argument": "amount", "at_least": 5}}
    run.agent.save()
    approval = ask(run, "issue_refund", {"order_id": "A1", "amount": "lots", "reason": "r"})
    why = explain(Approval.objects.select_related("run__agent").get(pk=approval.pk))
    assert (why.amount, why.total, why.group) == ("", "", "")
    assert why.headline.startswith("the profile ticket-assistant's rule")  # nothing stored
    assert why.figures == "this call: amount not a clear number (a person from 5)"


# --- the form -------------------------------------------------------------------------------


def test_text_arguments_are_plain_text_in_textareas(people) -> None:
    run = f.make_run(people["operator"])
    message = 'Hi Zoe,\n\nI\'m sorry about the "cracked" teapot.\n<script>x</script>'
    approval = ask(run, "send_customer_reply", {"customer_id": "C001", "message": message})
    page = html_of(client_for(people["approver"]).get("/approvals/"))
    area = re.search(
        r'<textarea id="arg-\d+-1" name="arg.message"[^>]*>\n(.*?)</textarea>', page, re.S
    )
    assert area is not None
    assert area.group(1) == (
        "Hi Zoe,\n\nI&#x27;m sorry about the &quot;cracked&quot; teapot.\n"
        "&lt;script&gt;x&lt;/script&gt;"
    )  # new lines as new lines, no JSON quoting, escaped
    assert 'name="arg.customer_id"' in page
    assert f'id="args-{approval.pk}"' in page  # Edit as JSON stays
    # Sent back with a browser's CR LF new lines, the argument has plain new lines.
    edited = "Hi Zoe,\r\n\r\nA new teapot is on its way.\r\n"
    client_for(people["approver"]).post(
        f"/approvals/{approval.pk}/decide/",
        {"decision": "edit", "arg.customer_id": "C001", "arg.message": edited},
    )
    approval.refresh_from_db()
    assert approval.status == "approved"
    assert approval.edited_arguments == {
        "customer_id": "C001",
        "message": "Hi Zoe,\n\nA new teapot is on its way.\n",
    }


def test_each_kind_of_argument_has_its_input(people, form_tools) -> None:
    run = f.make_run(people["operator"])
    asked = {"device": "LAPTOP-7", "budget": 120.5, "mode": "lenient", "wipe": True,
             "tags": ["it", "loan"], "retries": 3}  # fmt: skip
    approval = ask(run, "configure_device", asked)
    fields = {x.name: x for x in approval_form.fields_for("configure_device", asked) or []}
    assert {n: x.kind for n, x in fields.items()} == {
        "device": "text",
        "budget": "number",
        "mode": "select",
        "wipe": "checkbox",
        "tags": "json",
        "retries": "integer",
        "note": "text",
    }
    assert fields["mode"].options == [('"strict"', "strict"), ('"lenient"', "lenient")]
    assert fields["wipe"].checked and fields["budget"].value == "120.5"
    assert fields["note"].nullable and not fields["note"].required
    page = html_of(client_for(people["approver"]).get(f"/runs/{run.pk}/"))
    assert re.search(r'<select id="arg-\d+-2" name="arg.mode"', page)
    assert '<option value="&quot;lenient&quot;" selected>lenient</option>' in page
    assert re.search(r'type="checkbox" name="arg.wipe" value="true" checked', page)
    assert re.search(r'type="number" name="arg.budget" value="120.5" step="any"', page)
    assert re.search(r'type="number" name="arg.retries" value="3" step="1"', page)
    response = client_for(people["approver"]).post(
        f"/approvals/{approval.pk}/decide/",
        {
            "decision": "edit",
            "arg.device": "LAPTOP-8",
            "arg.budget": "99.90",
            "arg.mode": '"lenient"',
            # no arg.wipe: an unticked box is false
            "arg.tags": '["it"]',
            "arg.retries": "5",
            "arg.note": "",
        },
    )
    approval.refresh_from_db()
    assert approval.status == "approved", response
    assert approval.edited_arguments == {
        "device": "LAPTOP-8",
        "budget": 99.9,
        "mode": "lenient",
        "wipe": False,
        "tags": ["it"],
        "retries": 5,
        "note": None,
    }


def post_form(client: Client, approval: Approval, **fields: str) -> str:
    data = {"decision": "edit", **{f"arg.{k}": v for k, v in fields.items()}}
    return html_of(client.post(f"/approvals/{approval.pk}/decide/", data, HTTP_HX_REQUEST="true"))


def error_beside(page: str, name: str) -> str:
    block = re.search(
        rf'<div class="arg-field has-error" data-arg="{name}">(.*?)</div>', page, re.S
    )
    assert block is not None, f"no error beside {name}"
    found = re.search(r'<p class="field-error small" role="alert">(.*?)</p>', block.group(1))
    assert found is not None
    return found.group(1)


def test_errors_appear_beside_their_field_and_nothing_is_decided(people, form_tools) -> None:
    run = f.make_run(people["operator"])
    approval = ask(
        run,
        "configure_device",
        {"device": "D", "budget": 1, "mode": "strict", "wipe": False, "tags": []},
    )
    client = client_for(people["approver"])
    page = post_form(
        client, approval, device="D", budget="", mode='"strict"', tags="[not json", retries="2.5"
    )
    assert error_beside(page, "budget") == "required"
    assert "this argument is JSON" in error_beside(page, "tags")
    assert error_beside(page, "retries") == "must be a whole number"
    assert (
        'name="arg.tags" rows="3" class="mono" spellcheck="false" aria-invalid="true">\n[not json<'
        in page
    )  # kept as typed
    assert "fix the fields marked below" in page
    # The tool's schema, through the decide action: beside the field it names.
    page = post_form(client, approval, device="D", budget="1", mode='"fast"', tags="[]")
    assert error_beside(page, "mode") == "pick one of the choices"
    page = post_form(
        client, approval, device="D", budget="1", mode='"strict"', tags='[1, {"a": 2}]'
    )
    assert "Input should be a valid string" in error_beside(page, "tags")
    # The tool's own check: above the button, in its words.
    page = post_form(
        client, approval, device="D", budget="1", mode='"strict"', tags="[]", wipe="true"
    )
    assert "Not approved: A strict set-up never wipes the device" in page
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_a_refund_edit_refused_by_the_tools_check_says_why(people) -> None:
    make_order(make_customer(), "A1001")
    approval = refund_waiting(people)
    client = client_for(people["approver"])
    page = post_form(client, approval, order_id="A1001", amount="-5", reason="r")
    assert "Not approved:" in page and "must be positive" in page
    page = post_form(client, approval, order_id="A1001", amount="1e999", reason="r")
    assert "Not approved" in page
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    post_form(client, approval, order_id="A1001", amount="12.50", reason="partial")
    approval.refresh_from_db()
    assert approval.status == "approved"
    assert approval.edited_arguments == {"order_id": "A1001", "amount": 12.5, "reason": "partial"}


def test_the_api_names_the_argument_in_its_422(people, form_tools) -> None:
    run = f.make_run(people["operator"])
    approval = ask(run, "configure_device", {"device": "D"})
    response = client_for(people["approver"]).post(
        f"/api/approvals/{approval.pk}/decide",
        json.dumps({"decision": "approve", "arguments": {"device": "D", "budget": "x"}}),
        content_type="application/json",
    )
    assert response.status_code == 422, response.content
    fields = response.json()["error"]["details"]["fields"]
    assert fields["budget"].startswith("Input should be a valid number")
    assert fields["mode"] == "required"


# --- reject ------------------------------------------------------------------------------


def test_a_reject_needs_a_reason_which_goes_to_the_model(people) -> None:
    approval = refund_waiting(people)
    client = client_for(people["approver"])
    page = html_of(
        client.post(
            f"/approvals/{approval.pk}/decide/",
            {"decision": "reject", "comment": "  "},
            HTTP_HX_REQUEST="true",
        )
    )
    assert "Say why: the reason goes back to the model." in page
    assert re.search(r'<details class="reject" open>', page)
    assert re.search(r'<textarea id="comment-\d+" name="comment" rows="2" required', page)
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    with pytest.raises(actions.ReasonRequired):
        actions.do_decide_approval(
            approval_id=approval.pk, user=people["approver"], decision="reject"
        )
    client.post(f"/approvals/{approval.pk}/decide/", {"decision": "reject", "comment": "Too much"})
    approval.refresh_from_db()
    assert (approval.status, approval.comment) == ("rejected", "Too much")


def test_high_risk_cards_carry_their_risk_for_the_keyboard(people) -> None:
    approval = refund_waiting(people)
    page = html_of(client_for(people["approver"]).get("/approvals/"))
    assert f'id="inbox-{approval.pk}" data-approval="{approval.pk}" data-risk="high"' in page
    # Its confirmation (the browser test presses the keys: tests/browser/test_approver.py)
    assert 'class="confirm-approve notice small" role="alertdialog"' in page


def test_a_tool_described_by_a_json_schema_gets_its_form_too(people, form_tools) -> None:
    run = f.make_run(people["operator"])
    approval = ask(run, "crm__close_case", {"case": "K-1", "outcome": "solved"})
    fields = {
        x.name: x for x in approval_form.fields_for("crm__close_case", approval.arguments) or []
    }
    assert {n: (x.kind, x.required, x.nullable) for n, x in fields.items()} == {
        "case": ("text", True, False),
        "outcome": ("select", True, False),
        "refund": ("number", False, True),
    }
    client = client_for(people["approver"])
    page = post_form(client, approval, case="K-1", outcome='"solved"', refund="-3")
    assert "less than the minimum of 0" in error_beside(page, "refund")
    post_form(client, approval, case="K-2", outcome='"duplicate"', refund="")
    approval.refresh_from_db()
    assert approval.status == "approved"
    assert approval.edited_arguments == {"case": "K-2", "outcome": "duplicate", "refund": None}
