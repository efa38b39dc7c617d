"""What a person does in the browser, against Daphne + a real Celery worker + the demo
model: start a run and watch it, approve as a second person, survive going offline,
replay a finished run."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentweb.runs import actions
from agentweb.runs.models import Approval, Run, RunEvent
from tests.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

REFUND_TICKET = "Teapot arrived cracked"  # the demo model asks to refund it
WHERE_TICKET = "Where is my order?"


def start_run(person: Any, subject: str) -> int:
    person.goto("/tickets/")
    card = person.page.locator("li.ticket", has_text=subject)
    card.get_by_role("button", name="Run assistant").click()
    person.page.wait_for_url(re.compile(r"/runs/\d+/$"))
    # Set once the page has loaded; a reload would lose it.
    person.page.evaluate("window.__sameDocument = true")
    return int(person.page.url.rstrip("/").split("/")[-1])


def page_seqs(person: Any) -> list[int]:
    ids = person.page.eval_on_selector_all("#timeline > li", "els => els.map(e => e.id)")
    return [int(i.split("-")[1]) for i in ids]


def stored_seqs(run_id: int) -> list[int]:
    return list(
        RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True)
    )


def assert_every_step_once_in_order(person: Any, run_id: int) -> None:
    seqs = page_seqs(person)
    assert seqs == stored_seqs(run_id)
    assert seqs == list(range(1, len(seqs) + 1))
    ids = person.page.eval_on_selector_all('[id^="event-"]', "els => els.map(e => e.id)")
    assert len(ids) == len(set(ids))


def approve_until_done(run_id: int, approver: Any) -> Run:
    """Approve each call the run asks for (refund, then the reply) until it finishes."""
    while True:
        run = wait_for_status(run_id, "waiting_approval", "succeeded", "failed", "cancelled")
        if run.status != "waiting_approval":
            return run
        for approval in Approval.objects.filter(run_id=run_id, status="pending"):
            actions.do_decide_approval(approval_id=approval.pk, user=approver, decision="approve")
        wait_for(lambda: Run.objects.get(pk=run_id).status != "waiting_approval", timeout=10)


def wait_for_status(run_id: int, *statuses: str) -> Run:
    return wait_for(lambda: Run.objects.filter(pk=run_id, status__in=statuses).first(), timeout=60)


def test_it_starts_a_run_and_shows_its_steps_live(login: Any) -> None:
    operator = login("operator")
    run_id = start_run(operator, WHERE_TICKET)
    page = operator.page
    page.wait_for_selector(".ev-approval_requested", timeout=30_000)
    page.wait_for_selector("#run-status.status-waiting_approval", timeout=30_000)
    wait_for_status(run_id, "waiting_approval")
    assert_every_step_once_in_order(operator, run_id)
    assert page.locator(".ev-model_called").count() >= 1
    assert page.locator(".ev-tool_call_finished").count() >= 1
    assert "Waiting for an approver" in page.locator(".ev-approval_requested").inner_text()
    assert page.evaluate("window.__sameDocument") is True
    operator.shot("run-waiting-operator")


def test_a_second_person_approves_a_refund_and_the_run_continues_live(login: Any) -> None:
    operator = login("operator")
    run_id = start_run(operator, REFUND_TICKET)
    operator.page.wait_for_selector(".ev-approval_requested", timeout=30_000)
    approver = login("approver")
    approver.goto("/approvals/")
    item = approver.page.locator("article.inbox-item", has_text="issue_refund")
    item.wait_for()
    assert approver.page.locator("#nav-pending").inner_text() == "1"
    approver.shot("approvals-inbox")
    item.get_by_role("button", name="Approve", exact=True).click()
    # The inbox refreshes itself: the request leaves the list. The run continues and asks
    # for its next call (the reply to the customer), which appears in the list: approve it.
    reply = approver.page.locator("article.inbox-item", has_text="send_customer_reply")
    reply.wait_for(timeout=30_000)
    assert approver.page.locator("article.inbox-item", has_text="issue_refund").count() == 0
    reply.get_by_role("button", name="Approve", exact=True).click()
    approver.page.wait_for_selector('[data-testid="no-approvals"]', timeout=15_000)
    approver.page.wait_for_function(
        "() => document.getElementById('nav-pending').textContent.trim() === '0'",
        timeout=15_000,
    )
    # Meanwhile the operator's page, never reloaded, follows the run to its end.
    page = operator.page
    page.wait_for_selector(".ev-run_finished", timeout=60_000)
    page.wait_for_selector("#run-status.status-succeeded", timeout=15_000)
    assert page.evaluate("window.__sameDocument") is True
    # The final answer is shown once, also when it arrived live.
    final = page.locator(".ev-run_finished .final").inner_text().strip()
    thoughts = [t.strip() for t in page.locator(".ev-model_called .thought").all_inner_texts()]
    assert final and final not in thoughts
    assert page.locator(".ev-model_called .final-ref").count() == 1
    decided = page.locator(".ev-approval_decided").all_inner_texts()
    assert len(decided) == 2
    assert all("Approved" in d and "approver" in d for d in decided)
    finished = page.locator(".ev-tool_call_finished").all_inner_texts()
    assert any("issue_refund" in t and "✓ result" in t for t in finished)
    assert_every_step_once_in_order(operator, run_id)
    assert set(Approval.objects.filter(run_id=run_id).values_list("status", flat=True)) == {
        "approved"
    }
    operator.shot("run-finished-operator")


def test_offline_and_back_shows_every_step_once_in_order(login: Any, demo: dict) -> None:
    operator = login("operator")
    run_id = start_run(operator, REFUND_TICKET)
    page = operator.page
    page.wait_for_selector(".ev-approval_requested", timeout=30_000)
    before = page_seqs(operator)

    operator.context.set_offline(True)
    page.wait_for_function(
        # A function, not an expression: Playwright evals expressions in the page, which
        # the Content-Security-Policy forbids.
        "() => ['offline', 'retrying', 'connecting']"
        ".includes(document.getElementById('conn').dataset.state)",
        timeout=10_000,
    )
    assert approve_until_done(run_id, demo["approver"]).status == "succeeded"
    page.wait_for_timeout(500)
    assert page_seqs(operator) == before, "nothing arrives while offline"
    operator.shot("run-offline", full_page=False)

    operator.context.set_offline(False)
    page.wait_for_selector(".ev-run_finished", timeout=30_000)
    page.wait_for_timeout(300)
    assert_every_step_once_in_order(operator, run_id)
    assert len(page_seqs(operator)) > len(before)
    assert page.evaluate("window.__sameDocument") is True
    operator.shot("run-back-online")


def test_replay_steps_through_a_finished_run(login: Any, demo: dict) -> None:
    operator = login("operator")
    run_id = start_run(operator, REFUND_TICKET)
    assert approve_until_done(run_id, demo["approver"]).status == "succeeded"
    total = len(stored_seqs(run_id))

    operator.goto(f"/runs/{run_id}/replay/")
    page = operator.page
    assert page.locator("#replay-pos").inner_text() == "1"
    assert page.locator(".ev.current").get_attribute("id") == "event-1"
    assert page.locator("#timeline > li:not(.future)").count() == 1

    page.keyboard.press("End")
    assert page.locator("#replay-pos").inner_text() == str(total)
    assert page.locator(".ev.current").get_attribute("id") == f"event-{total}"
    last_ctx = page.locator(".ctx-msg:not([hidden])").count()

    page.keyboard.press("Home")
    for step in range(2, total + 1):
        page.keyboard.press("ArrowRight")
        assert page.locator("#replay-pos").inner_text() == str(step)
    page.click("#replay-prev")
    assert page.locator(".ev.current").get_attribute("id") == f"event-{total - 1}"

    # The slider jumps to the first model call: it had only the task in front of it.
    first_model = page.locator(".ev-model_called").first.get_attribute("id")
    index = int(first_model.split("-")[1])
    page.locator("#replay-slider").fill(str(index))
    assert page.locator(".ctx-msg:not([hidden])").count() == 1
    assert last_ctx > 1
    operator.shot("replay")
    # Nothing ran again.
    assert len(stored_seqs(run_id)) == total


def test_the_runs_list_follows_statuses_live(login: Any, demo: dict) -> None:
    from agentweb.tickets.models import Ticket

    ticket = Ticket.objects.get(subject=REFUND_TICKET)
    run = actions.do_create_run(user=demo["operator"], task="", ticket_id=ticket.pk)
    wait_for_status(run.pk, "waiting_approval")
    admin = login("admin")
    admin.goto("/runs/")
    page = admin.page
    page.evaluate("window.__sameDocument = true")
    badge = page.locator(f'[data-run-status="{run.pk}"]')
    assert badge.inner_text() == "Waiting on approver"
    assert approve_until_done(run.pk, demo["approver"]).status == "succeeded"
    page.wait_for_function(
        f"() => document.querySelector('[data-run-status=\"{run.pk}\"]').textContent.trim()"
        " === 'Succeeded'",
        timeout=15_000,
    )
    assert "status-succeeded" in (badge.get_attribute("class") or "")
    # A run started elsewhere is announced instead of silently missing.
    actions.do_create_run(user=demo["operator"], task="Is KIT-0101 in stock?")
    page.wait_for_selector("#new-runs:not([hidden])", timeout=15_000)
    assert page.evaluate("window.__sameDocument") is True
    admin.shot("runs-list-live")
