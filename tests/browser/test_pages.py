"""The first hour, in a browser at desktop (1440 px) and phone (390 px) width: API tokens,
the navigation, error pages, what is waiting for me, and outcomes beside statuses.
Screenshots go to /tmp/shots (named <test>-<width>.png)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from agentweb.runs import actions
from agentweb.runs.models import Run, ToolExecution
from agentweb.tickets.models import Ticket
from tests.web import factories as f

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

WIDTHS = [1440, 390]


def no_sideways_scroll(person: Any) -> None:
    page = person.page
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"{page.url}: page is {scroll} px wide in a {inner} px window"


def open_menu(person: Any, width: int) -> None:
    """Phone: the Menu button; desktop: the user menu."""
    page = person.page
    if width < 700:
        assert page.locator(".mainnav").is_hidden()
        page.get_by_role("button", name=re.compile("Menu")).click()
        assert page.locator(".mainnav").is_visible()
    else:
        assert page.get_by_role("button", name=re.compile("Menu")).is_hidden()
        page.locator(".usermenu-toggle").click()
    assert page.get_by_role("button", name="Log out").is_visible()


def settled_run(demo: dict[str, Any]) -> Run:
    """Succeeded, but its cancellation was rejected; its refund of 38.00 ran."""
    ticket = Ticket.objects.order_by("pk").first()
    run = f.make_run(demo["operator"], task="Cancel the order, or refund it")
    run.ticket = ticket
    run.save(update_fields=["ticket"])
    f.emit(run, {"type": "run_started", "data": {}}, f.model_called())
    cancel = f.request_approval(
        run, tool="cancel_order", call_id="c-cancel", arguments={"order_id": "A1", "reason": "x"}
    )
    actions.do_decide_approval(
        approval_id=cancel.pk, user=demo["approver"], decision="reject", comment="Shipped already"
    )
    ToolExecution.objects.create(
        run=run,
        call_id="c-refund",
        tool="issue_refund",
        arguments={"order_id": "A1", "amount": 38, "reason": "late"},
        status=ToolExecution.Status.SUCCEEDED,
        result={"refund": "R1"},
    )
    f.emit(run, {"type": "run_finished", "data": {"final_answer": "Done."}}, status="succeeded")
    return run


@pytest.mark.parametrize("width", WIDTHS)
def test_api_tokens_in_the_browser(login: Any, width: int) -> None:
    operator = login("operator", width=width)
    page = operator.page
    open_menu(operator, width)
    page.get_by_role("link", name="API tokens").click()
    page.wait_for_url(re.compile(r"/account/tokens/$"))
    page.fill("input[name=name]", f"laptop script {width}")
    page.get_by_role("button", name="Create token").click()
    page.wait_for_selector("#new-token")
    raw = page.input_value("#new-token")
    assert raw.startswith("aw_")
    no_sideways_scroll(operator)
    operator.shot(f"tokens-created-{width}")
    api = httpx.get(
        f"{operator.base}/api/runs", headers={"Authorization": f"Bearer {raw}"}, timeout=10
    )
    assert api.status_code == 200
    page.reload()
    assert page.locator("#new-token").count() == 0  # shown once
    row = page.locator("tr", has_text=f"laptop script {width}")
    assert "just now" in row.inner_text()  # created, and last used by the call above
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke").click()
    page.wait_for_selector(".flash-success")
    assert page.locator("tr", has_text=f"laptop script {width}").count() == 0
    api = httpx.get(
        f"{operator.base}/api/runs", headers={"Authorization": f"Bearer {raw}"}, timeout=10
    )
    assert api.status_code == 401


@pytest.mark.parametrize("width", WIDTHS)
def test_error_pages_are_in_the_layout(login: Any, width: int) -> None:
    operator = login("operator", width=width)
    page = operator.page
    for path, status in [
        ("/agents/", 403),
        ("/runs/999999/", 404),
        ("/runs/new/", 405),
        ("/no/such/page/", 404),
    ]:
        response = page.goto(operator.base + path)
        assert response is not None and response.status == status, path
        assert page.locator(f'.error-page[data-status="{status}"]').is_visible(), path
        assert page.locator(".topbar").is_visible()
        assert "URLconf" not in page.content()
        no_sideways_scroll(operator)
    operator.shot(f"error-405-{width}")
    operator.goto("/runs/compare/?a=999998&b=999999")
    errors = page.locator("p.error").all_inner_texts()
    assert any("Run #999999 does not exist" in text for text in errors), errors
    operator.shot(f"compare-unknown-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_badge_counts_what_i_may_decide(login: Any, demo: dict[str, Any], width: int) -> None:
    mine = f.make_run(demo["operator"], task="Refund the cracked teapot")
    f.emit(mine, {"type": "run_started", "data": {}}, f.model_called())
    f.request_approval(mine)
    admins = f.make_run(demo["admin"], task="Admin's own refund")
    f.request_approval(admins)

    approver = login("approver", width=width)
    assert approver.page.url.endswith("/approvals/")  # approvers land on Approvals
    badge = approver.page.locator("#nav-pending")
    if width < 700:
        approver.page.get_by_role("button", name=re.compile("Menu")).click()
    assert badge.is_visible() and badge.inner_text() == "2"
    assert approver.page.locator(".inbox-item").count() == 2
    no_sideways_scroll(approver)
    approver.shot(f"approvals-approver-{width}")

    admin = login("admin", width=width)
    if width < 700:
        admin.page.get_by_role("button", name=re.compile("Menu")).click()
    assert admin.page.locator("#nav-pending").inner_text() == "1"  # not their own run's call

    operator = login("operator", width=width)
    assert operator.page.url.endswith("/tickets/")
    if width < 700:
        operator.page.get_by_role("button", name=re.compile("Menu")).click()
    assert operator.page.locator("#nav-pending").is_hidden()  # decides nothing: no badge
    operator.goto("/runs/")
    card = operator.page.locator("tr", has_text="Refund the cracked teapot")
    assert "Waiting on approver" in card.inner_text()
    no_sideways_scroll(operator)
    operator.shot(f"runs-operator-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_outcomes_beside_the_status(login: Any, demo: dict[str, Any], width: int) -> None:
    run = settled_run(demo)
    operator = login("operator", width=width)
    page = operator.page
    for path in (f"/runs/{run.pk}/", "/runs/", "/tickets/"):
        operator.goto(path)
        scope = page.locator(
            {"/runs/": "tr", "/tickets/": "li.ticket"}.get(path, ".run-head"),
            has=page.locator(f'[data-run-status="{run.pk}"]'),
        )
        assert "Needs follow-up" in scope.inner_text(), path  # succeeded, one rejected
        rejected = scope.locator(".outcome-bad", has_text="cancellation rejected")
        assert rejected.is_visible(), path
        assert scope.locator(".outcome-ok", has_text="refund 38.00 issued").is_visible(), path
        no_sideways_scroll(operator)
        operator.shot(f"outcome-{path.strip('/').replace('/', '-') or 'run'}-{width}")


def test_phone_pages_fit_and_keep_their_controls_on_one_line(
    login: Any, demo: dict[str, Any]
) -> None:
    run = settled_run(demo)
    other = detailed_run(demo)
    operator = login("operator", width=390)
    for path in [
        f"/runs/compare/?a={run.pk}&b={other.pk}",
        "/tickets/",
        "/runs/",
        "/approvals/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/replay/",
        "/runs/compare/",
        "/runs/import/",
        "/account/tokens/",
    ]:
        operator.goto(path)
        no_sideways_scroll(operator)
        operator.shot("phone-" + re.sub(r"[^a-z0-9]+", "-", path).strip("-"), full_page=False)
    operator.goto(f"/runs/{run.pk}/replay/")
    tops = operator.page.eval_on_selector_all(
        ".replay-controls > *:not([hidden])",
        "els => els.filter(e => e.offsetParent).map(e => {"
        " const r = e.getBoundingClientRect(); return Math.round(r.top + r.height / 2); })",
    )
    assert len(tops) >= 3 and max(tops) - min(tops) <= 6, tops
    # Runs are cards: no table header row on a phone.
    operator.goto("/runs/")
    assert operator.page.locator(".runs-table thead").is_hidden()
    open_menu(operator, 390)
    operator.shot("phone-menu-open", full_page=False)


def detailed_run(demo: dict[str, Any]) -> Run:
    """A finished run with everything the run page explains: a nested tool result, an
    auto-approved call, an approval edited after a 74 s wait (86.00 → 60.00: the demo
    order allows at most 87.00), and the final answer."""
    from datetime import timedelta

    from django.utils import timezone

    from agentweb.runs.models import RunEvent

    run = f.make_run(demo["operator"], task="Refund the cracked teapot")
    finished = f.tool_finished()
    finished["data"]["duration_ms"] = 200
    note = f.tool_started(tool="add_customer_note", call_id="c2", risk="medium")
    note["data"]["approval"] = {"by": "policy", "reason": "notes are reversible"}
    note["data"]["arguments"] = {"customer_id": "C1", "note": "teapot cracked"}
    f.emit(run, {"type": "run_started", "data": {}}, f.model_called(), f.tool_started(), finished)
    f.emit(run, note)
    approval = f.request_approval(
        run, arguments={"order_id": "A1001", "amount": 86.0, "reason": "cracked"}
    )
    RunEvent.objects.filter(run=run, type="approval_requested").update(
        at=timezone.now() - timedelta(seconds=74)
    )
    actions.do_decide_approval(
        approval_id=approval.pk,
        user=demo["approver"],
        decision="approve",
        arguments={"order_id": "A1001", "amount": 60.0, "reason": "cracked"},
    )
    answer = "A refund of 60.00 is on its way."
    f.emit(
        run,
        f.model_called(text=answer, tool=""),
        {"type": "run_finished", "data": {"final_answer": answer}},
        status="succeeded",
    )
    return run


@pytest.mark.parametrize("width", WIDTHS)
def test_the_run_page_explains_itself(login: Any, demo: dict[str, Any], width: int) -> None:
    run = detailed_run(demo)
    operator = login("operator", width=width)
    operator.goto(f"/runs/{run.pk}/")
    page = operator.page
    assert page.get_by_text("A refund of 60.00 is on its way.").count() == 1
    assert "waiting for approval 1m 14s" in page.locator(".timing-legend").inner_text()
    assert "+0.2 s" in page.locator(".ev-tool_call_finished").first.inner_text()
    assert "notes are reversible" in page.locator(".auto-approved").inner_text()
    changes = page.locator(".arg-changes").first.inner_text()
    assert "86.00" in changes and "60.00" in changes
    no_sideways_scroll(operator)
    operator.shot(f"run-details-{width}")
    approver = login("approver", width=width)
    recent = approver.page.locator("table.decided tr", has_text="issue_refund").first
    assert "86.00" in recent.inner_text() and "60.00" in recent.inner_text()
    no_sideways_scroll(approver)
    approver.shot(f"recently-decided-{width}")


def test_cancel_run_asks_first(login: Any, demo: dict[str, Any]) -> None:
    run = f.make_run(demo["operator"], task="A long job")
    f.emit(run, {"type": "run_started", "data": {}}, f.model_called())
    operator = login("operator")
    operator.goto(f"/runs/{run.pk}/")
    page = operator.page
    questions: list[str] = []

    def say_no(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", say_no)
    page.get_by_role("button", name="Cancel run").click()
    page.wait_for_timeout(300)
    assert questions and "Cancel run #" in questions[0]
    run.refresh_from_db()
    assert run.cancel_requested is False  # "no" cancels nothing
    assert page.locator(".flash").count() == 0
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel run").click()
    page.wait_for_selector(".flash li", timeout=10_000)
    assert "Cancellation requested" in page.locator(".flash").inner_text()
    run.refresh_from_db()
    assert run.cancel_requested is True


def test_the_approvals_inbox_answers_to_keys(login: Any, demo: dict[str, Any]) -> None:
    from agentweb.runs.models import Approval

    first = f.make_run(demo["operator"], task="First refund")
    one = f.request_approval(first)
    second = f.make_run(demo["operator"], task="Second refund")
    two = f.request_approval(second)
    approver = login("approver")
    page = approver.page
    assert page.url.endswith("/approvals/")
    page.wait_for_selector("#inbox .inbox-item")
    page.keyboard.press("j")
    assert page.locator("#inbox .inbox-item.selected").get_attribute("id") == f"inbox-{one.pk}"
    page.keyboard.press("j")
    assert page.locator("#inbox .inbox-item.selected").get_attribute("id") == f"inbox-{two.pk}"
    page.keyboard.press("k")
    assert page.locator("#inbox .inbox-item.selected").get_attribute("id") == f"inbox-{one.pk}"
    page.keyboard.press("e")  # edit box opens with the cursor in it; keys now type
    edit = page.locator(f"#inbox-{one.pk} details.edit")
    assert edit.get_attribute("open") is not None
    assert page.evaluate("document.activeElement.name") == "arg.order_id"  # the first field
    page.keyboard.press("Escape")
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("r")
    assert page.locator(f"#inbox-{one.pk} details.reject").get_attribute("open") is not None
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("a")  # a high-risk call: "a" asks first, Enter confirms
    page.locator(f"#inbox-{one.pk} .confirm-approve").wait_for(state="visible")
    page.keyboard.press("Enter")
    page.wait_for_function(
        # A function: Playwright evals a bare expression, which the CSP forbids.
        f"() => !document.querySelector('#inbox-{one.pk} button[value=approve]')",
        timeout=10_000,
    )
    one.refresh_from_db()
    assert one.status == Approval.Status.APPROVED and one.decided_by == demo["approver"]
    two.refresh_from_db()
    assert two.status == Approval.Status.PENDING
    approver.shot("approvals-keys")


def test_admin_pages_fit_a_phone(login: Any, demo: dict[str, Any]) -> None:
    from agentweb.runs.models import AgentProfile

    profile = AgentProfile.objects.order_by("pk").first()
    assert profile is not None
    admin = login("admin", width=390)
    for path in ["/agents/", f"/agents/{profile.pk}/"]:
        admin.goto(path)
        no_sideways_scroll(admin)
        admin.shot("phone-admin-" + re.sub(r"[^a-z0-9]+", "-", path).strip("-"), full_page=False)
