"""The trace and the profile form in Chromium at 1440 and 390 px (DESIGN §16, issue
26.5 and 26.6): each model turn opens the messages and tool specs it was sent, the rendered
prompt first; compare pairs model turns with their tokens, cost and time and keeps a
rejected call; the profile form picks tools, rules and delegates, and a failed save says
so at the top, linking to each refused field. Screenshots go to /tmp/shots."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentweb.runs import actions
from agentweb.runs.models import AgentProfile, Run, RunEvent
from tests.conftest import wait_for
from tests.web import factories as f

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

WIDTHS = [1440, 390]


def no_sideways_scroll(person: Any) -> None:
    scroll, inner = person.page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert scroll <= inner, f"{person.page.url}: page is {scroll} px wide in {inner} px"


@pytest.mark.parametrize("width", WIDTHS)
def test_a_model_turn_shows_what_it_was_sent(login: Any, demo: dict[str, Any], width: int) -> None:
    run = actions.do_create_run(user=demo["operator"], task="Where is order A1001?")
    wait_for(lambda: RunEvent.objects.filter(run=run, type="model_called").count() >= 2, 60)
    operator = login("operator", width=width)
    page = operator.page
    operator.goto(f"/runs/{run.pk}/")
    page.wait_for_selector(".ev-model_called details.sent")
    second = page.locator(".ev-model_called").nth(1)
    second.locator("details.sent > summary").click()
    view = second.locator(".sent-view")
    view.wait_for(timeout=10_000)  # loaded when opened
    text = view.inner_text()
    prompt = RunEvent.objects.get(run=run, type="run_started").data["system_prompt"]
    first_line = prompt.strip().splitlines()[0]
    assert first_line in text and "operator" in text  # rendered: {{user}} filled in
    assert "Where is order A1001?" in text
    roles = view.locator(".sent-msg .badge").all_inner_texts()
    assert roles[:4] == ["system", "user", "assistant", "tool"], roles
    assert "tool specs offered" in text.lower() and "get_order" in text
    view.locator(".sent-tools details > summary").first.click()
    assert '"properties"' in view.locator(".sent-tools pre").first.inner_text()
    no_sideways_scroll(operator)
    operator.shot(f"trace-sent-{width}")
    view.locator(".sent-msg").nth(0).scroll_into_view_if_needed()
    operator.shot(f"trace-sent-view-{width}", full_page=False)


def _run_with_refund(user: Any, decision: str) -> Run:
    run = f.make_run(user, task="Refund the cracked teapot on A1001")
    arguments = {"order_id": "A1001", "amount": 20, "reason": "cracked"}
    first = f.model_called(text="Looking up the order.")
    if decision == "rejected":
        first["data"].update(latency_ms=480, tokens={"input": 910, "output": 55})
    events: list[dict[str, Any]] = [
        {"type": "run_started", "data": {}},
        first,
        f.tool_started(),
        f.tool_finished(),
        f.model_called(text="Refunding.", tool="issue_refund", call_id="c2", arguments=arguments),
        {
            "type": "approval_requested",
            "data": {
                "call_id": "c2",
                "tool": "issue_refund",
                "arguments": arguments,
                "risk": "high",
                "reason": "high_risk",
            },
        },
        {
            "type": "approval_decided",
            "data": {
                "call_id": "c2",
                "decision": decision,
                "comment": "Wrong order, ask the customer" if decision == "rejected" else "",
                "arguments": None if decision == "rejected" else arguments,
                "tool": "issue_refund",
                "edited": False,
                "by": "approver",
            },
        },
    ]
    if decision == "approved":
        events += [
            f.tool_started(tool="issue_refund", call_id="c2", arguments=arguments),
            f.tool_finished(tool="issue_refund", call_id="c2", result={"refunded": 20}),
        ]
    answer = "Refunded 20." if decision == "approved" else "I did not refund it."
    events += [
        f.model_called(text=answer, tool=""),
        {"type": "run_finished", "data": {"final_answer": answer}},
    ]
    f.emit(run, *events, status=Run.Status.SUCCEEDED)
    Run.objects.filter(pk=run.pk).update(final_answer=answer)
    return run


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_pairs_turns_and_keeps_the_rejected_call(
    login: Any, demo: dict[str, Any], width: int
) -> None:
    a = _run_with_refund(demo["operator"], "approved")
    b = _run_with_refund(demo["operator"], "rejected")
    operator = login("operator", width=width)
    page = operator.page
    operator.goto(f"/runs/compare/?a={a.pk}&b={b.pk}")
    turns = page.locator("tr.cmp-turn")
    assert turns.count() == 3
    first = turns.nth(0).inner_text()
    assert "350 in" in first and "910 in" in first and "480 ms" in first
    assert "I did not refund it." in turns.nth(2).inner_text()
    refund = page.locator("tr.cmp-row").nth(1).inner_text()
    assert "rejected · not run" in refund and "issue_refund" in refund
    totals = page.locator("tr.cmp-totals").inner_text()
    assert "2 tool calls (1 not run)" in totals and "3 model turns" in totals
    no_sideways_scroll(operator)
    operator.shot(f"compare-turns-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_profile_form_picks_and_says_what_is_wrong_at_the_top(
    login: Any, demo: dict[str, Any], width: int
) -> None:
    admin = login("admin", width=width)
    page = admin.page
    admin.goto("/agents/new/")
    name = f"picker-{width}"
    page.fill("#id_name", name)
    page.fill("#id_system_prompt", "You help {{usr}}.\nThe ticket: {{ticket\nBe brief.")
    page.fill("#id_max_iterations", "0")
    page.check("#allow-issue_refund")
    page.check("#allow-get_order")
    row = page.locator("#tool-row-issue_refund")
    row.locator("select.policy-mode").select_option("amount")
    row.locator("select[name='policy_argument__issue_refund']").select_option("amount")
    row.locator("input[name='policy_at_least__issue_refund']").fill("20")
    row.locator("select[name='policy_sum_per__issue_refund']").select_option("order_id")
    page.locator("#tool-row-get_order select[name='risk__get_order']").select_option("medium")
    page.check("input[name=delegate][value=billing-specialist]")
    no_sideways_scroll(admin)
    admin.shot(f"profile-form-rows-{width}")
    page.locator("form.agent-form button[type=submit]").click()
    summary = page.locator("#form-errors")
    summary.wait_for()
    # the summary is in view at the top, not 1,200 px down
    box = summary.bounding_box()
    assert box is not None and box["y"] < page.viewport_size["height"], box
    text = summary.inner_text()
    assert "Not saved: 2 problems." in text, text
    assert "{{usr}} is not a variable" in text and "'{{ticket' is not closed" in text
    assert "must be from 1 to 200" in text
    admin.shot(f"profile-form-errors-{width}", full_page=False)
    summary.get_by_role("link", name="Max iterations").click()
    assert page.evaluate("location.hash") == "#field-max_iterations"
    # what was picked stayed; fix the two and save
    assert page.is_checked("#allow-issue_refund")
    assert row.locator("select.policy-mode").input_value() == "amount"
    page.fill("#id_system_prompt", "You help {{user}}.\nThe ticket: {{ticket}}\nBe brief.")
    page.fill("#id_max_iterations", "8")
    page.locator("form.agent-form button[type=submit]").click()
    page.wait_for_url(re.compile(r"/agents/\d+/(#.*)?$"))  # a redirect keeps the #
    made = AgentProfile.objects.get(name=name)
    assert made.allowed_tools == ["get_order", "issue_refund"]
    assert made.approval_policies == {
        "issue_refund": {"argument": "amount", "at_least": 20, "sum_per": "order_id"}
    }
    assert made.risk_overrides == {"get_order": "medium"}
    assert made.delegates == ["billing-specialist"] and made.max_iterations == 8
    admin.goto(f"/agents/{made.pk}/")
    no_sideways_scroll(admin)
    admin.shot(f"profile-form-saved-{width}")
