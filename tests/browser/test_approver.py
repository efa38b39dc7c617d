"""The approver's day in Chromium at 1440 and 390 px (DESIGN §16): each card says why a
person is needed; Edit & approve is a form of the tool's arguments (plain text, numbers,
choices, yes/no, JSON) with errors beside their field; "a" on a high-risk card asks first;
a reject needs a reason. Screenshots go to /tmp/shots (approver-<what>-<width>.png)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from agentweb.runs import actions
from agentweb.runs.models import Approval
from agentweb.tickets.models import Ticket
from tests.browser.conftest import Person
from tests.conftest import start_web, wait_for
from tests.web import factories as f
from tests.web.test_approval_cards import ask, refund_waiting

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

WIDTHS = [1440, 390]
QUEUE = f"approver-forms-{os.getpid()}"  # decisions' resumes: no worker serves it


@pytest.fixture(scope="module")
def form_web(stack_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The web process with the form tools loaded too (a tool with every kind of
    argument), on a queue of its own that no worker serves (nothing here runs)."""
    env = {**stack_env, "AGENTWEB_TOOLS": "tools.ticket,tests.web.form_tools"}
    env["AGENTWEB_QUEUE"] = QUEUE
    proc, url = start_web(env, tmp_path_factory.mktemp("form-web"))
    yield url
    proc.stop()
    from agentweb.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


@pytest.fixture
def person(browser: Any, form_web: str, demo: dict[str, Any]) -> Iterator[Any]:
    people: list[Person] = []

    def make(username: str, width: int) -> Person:
        one = Person(browser, form_web, username, demo["password"], width=width)
        people.append(one)
        return one

    yield make
    for one in people:
        assert one.errors == [], f"JavaScript errors: {one.errors}"
        one.close()


def no_sideways_scroll(person: Any) -> None:
    scroll, inner = person.page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert scroll <= inner, f"{person.page.url}: page is {scroll} px wide in {inner} px"


def refund_after_earlier_ones(demo: dict[str, Any]) -> Approval:
    return refund_waiting(demo)  # a refund of 20 on A1001 after 39 refunded on it


@pytest.mark.parametrize("width", WIDTHS)
def test_the_card_says_why_and_a_needs_a_confirmation(
    person: Any, demo: dict[str, Any], width: int
) -> None:
    approval = refund_after_earlier_ones(demo)
    approver = person("approver", width)
    page = approver.page
    approver.goto("/approvals/")
    card = page.locator(f"#inbox-{approval.pk}")
    why = card.locator("[data-testid=approval-why]").inner_text()
    assert "Why a person: amount on order_id A1001 reaches 20 (total 59.00)" in why
    assert "Rule: the profile ticket-assistant's rule for issue_refund" in why
    assert "This call: amount 20.00" in why and "total so far on order_id A1001: 59.00" in why
    no_sideways_scroll(approver)
    page.keyboard.press("j")
    page.keyboard.press("a")
    confirm = card.locator(".confirm-approve")
    confirm.wait_for(state="visible")
    assert page.evaluate("document.activeElement.dataset.confirmApprove") == ""
    approver.shot(f"approver-confirm-{width}")
    page.wait_for_timeout(500)
    assert Approval.objects.get(pk=approval.pk).status == "pending"  # one key did nothing
    page.keyboard.press("Escape")
    confirm.wait_for(state="hidden")
    page.keyboard.press("a")  # asks again; Enter on "Yes, approve" decides
    confirm.wait_for(state="visible")
    page.keyboard.press("Enter")
    _wait_status(approval.pk, "approved")
    assert Approval.objects.get(pk=approval.pk).decided_by == demo["approver"]


@pytest.mark.parametrize("width", WIDTHS)
def test_a_low_risk_card_is_approved_with_one_key(
    person: Any, demo: dict[str, Any], width: int
) -> None:
    run = f.make_run(demo["operator"], task="Note it")
    approval = ask(
        run,
        "add_customer_note",
        {"customer_id": "C001", "note": "called"},
        risk="medium",
        reason="policy",
    )
    approver = person("approver", width)
    approver.goto("/approvals/")
    approver.page.keyboard.press("j")
    approver.page.keyboard.press("a")
    _wait_status(approval.pk, "approved")


def _wait_status(approval_id: int, status: str) -> None:
    wait_for(lambda: Approval.objects.get(pk=approval_id).status == status, timeout=10)


@pytest.mark.parametrize("width", WIDTHS)
def test_edit_a_reply_as_plain_text(person: Any, demo: dict[str, Any], width: int) -> None:
    run = f.make_run(demo["operator"], task="Where is my teapot?")
    message = 'Hi Zoe,\n\nI\'m sorry your "teapot" is late.\n\nBest,\nSupport'
    approval = ask(run, "send_customer_reply", {"customer_id": "C001", "message": message})
    approver = person("approver", width)
    page = approver.page
    approver.goto("/approvals/")
    card = page.locator(f"#inbox-{approval.pk}")
    card.locator("details.edit > summary").click()
    area = card.locator('textarea[name="arg.message"]')
    assert area.input_value() == message  # plain text: no quotes, no \n
    assert card.get_by_text("Edit as JSON").is_visible()
    no_sideways_scroll(approver)
    approver.shot(f"approver-edit-reply-{width}")
    area.fill("Hi Zoe,\n\nA new teapot ships today.\n\nBest,\nSupport")
    card.get_by_role("button", name="Approve with these arguments").click()
    _wait_status(approval.pk, "approved")
    edited = Approval.objects.get(pk=approval.pk).edited_arguments
    assert edited == {
        "customer_id": "C001",
        "message": "Hi Zoe,\n\nA new teapot ships today.\n\nBest,\nSupport",
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_errors_sit_beside_their_field(person: Any, demo: dict[str, Any], width: int) -> None:
    approval = refund_after_earlier_ones(demo)
    approver = person("approver", width)
    page = approver.page
    approver.goto(f"/runs/{approval.run_id}/")
    slot = page.locator(f"#approval-{approval.pk}")
    why = slot.locator("[data-testid=approval-why]").inner_text()
    assert (
        "Rule: the profile ticket-assistant's rule" in why and "59.00" in why
    )  # the run page says why
    assert (
        "amount on order_id A1001 reaches 20" in page.locator(".ev-approval_requested").inner_text()
    )
    slot.locator("details.edit > summary").click()
    slot.locator('input[name="arg.amount"]').fill("")
    slot.get_by_role("button", name="Approve with these arguments").click()
    field = page.locator(f"#approval-{approval.pk} [data-arg=amount] .field-error")
    field.wait_for()
    assert field.inner_text() == "required"
    assert page.locator(f"#approval-{approval.pk} details.edit").get_attribute("open") is not None
    no_sideways_scroll(approver)
    approver.shot(f"approver-field-error-{width}")
    assert Approval.objects.get(pk=approval.pk).status == "pending"


@pytest.mark.parametrize("width", WIDTHS)
def test_choices_yes_no_and_json_arguments(person: Any, demo: dict[str, Any], width: int) -> None:
    run = f.make_run(demo["operator"], task="Set up the loaner")
    asked = {"device": "LAPTOP-7", "budget": 120.5, "mode": "strict", "wipe": False,
             "tags": ["loan"]}  # fmt: skip
    approval = ask(run, "configure_device", asked)
    approver = person("approver", width)
    page = approver.page
    approver.goto("/approvals/")
    card = page.locator(f"#inbox-{approval.pk}")
    page.keyboard.press("j")
    page.keyboard.press("e")  # opens the form at its first field
    assert page.evaluate("document.activeElement.name") == "arg.device"
    card.locator('select[name="arg.mode"]').select_option(label="lenient")
    card.locator('input[name="arg.wipe"]').check()
    card.locator('textarea[name="arg.tags"]').fill('["loan", "it"]')
    card.locator('input[name="arg.retries"]').fill("4")
    no_sideways_scroll(approver)
    approver.shot(f"approver-kinds-{width}")
    card.get_by_role("button", name="Approve with these arguments").click()
    _wait_status(approval.pk, "approved")
    assert Approval.objects.get(pk=approval.pk).edited_arguments == {
        "device": "LAPTOP-7",
        "budget": 120.5,
        "mode": "lenient",
        "wipe": True,
        "tags": ["loan", "it"],
        "retries": 4,
        "note": None,
    }


@pytest.mark.parametrize("width", WIDTHS)
def test_a_reject_needs_a_reason(person: Any, demo: dict[str, Any], width: int) -> None:
    approval = refund_after_earlier_ones(demo)
    approver = person("approver", width)
    page = approver.page
    approver.goto("/approvals/")
    page.keyboard.press("j")
    page.keyboard.press("r")
    card = page.locator(f"#inbox-{approval.pk}")
    reason = card.locator('textarea[name="comment"]')
    assert page.evaluate("document.activeElement.name") == "comment"
    card.get_by_role("button", name="Reject with reason").click()
    assert reason.evaluate("el => el.validity.valueMissing") is True  # the browser asks
    page.wait_for_timeout(300)
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    approver.shot(f"approver-reject-empty-{width}")
    reason.fill("The order was refunded already.")
    card.get_by_role("button", name="Reject with reason").click()
    _wait_status(approval.pk, "rejected")
    assert Approval.objects.get(pk=approval.pk).comment == "The order was refunded already."


@pytest.mark.parametrize("width", WIDTHS)
def test_needs_follow_up_instead_of_succeeded(
    person: Any, demo: dict[str, Any], width: int
) -> None:
    ticket = Ticket.objects.filter(status="open").order_by("pk").first()
    assert ticket is not None
    settled = f.make_run(demo["operator"], task="Cancel the order, or refund it")
    settled.ticket = ticket
    settled.save(update_fields=["ticket"])
    cancel = f.request_approval(
        settled, tool="cancel_order", call_id="c1", arguments={"order_id": "A1001", "reason": "x"}
    )
    actions.do_decide_approval(
        approval_id=cancel.pk, user=demo["approver"], decision="reject", comment="Shipped"
    )
    f.emit(settled, {"type": "run_finished", "data": {"final_answer": "Done."}}, status="succeeded")
    fine = f.make_run(demo["operator"], task="Where is my parcel?")
    f.emit(
        fine, {"type": "run_finished", "data": {"final_answer": "On its way."}}, status="succeeded"
    )
    admin = person("admin", width)
    page = admin.page
    admin.goto("/runs/")
    assert page.locator(f'[data-run-status="{settled.pk}"]').inner_text() == "Needs follow-up"
    assert page.locator(f'[data-run-status="{fine.pk}"]').inner_text() == "Succeeded"
    page.select_option("#id_outcome", "needs_follow_up")  # the list swaps in place (htmx)
    page.wait_for_url(re.compile(r"outcome=needs_follow_up"))
    page.locator(f'#runs-table [data-run-status="{fine.pk}"]').wait_for(state="detached")
    assert page.locator(f'#runs-table [data-run-status="{settled.pk}"]').is_visible()
    no_sideways_scroll(admin)
    admin.shot(f"approver-follow-up-runs-{width}")
    admin.goto(f"/runs/{settled.pk}/")
    assert page.locator("#run-status").inner_text() == "Needs follow-up"
    assert "cancellation rejected" in page.locator(".run-head").inner_text()
    admin.shot(f"approver-follow-up-run-{width}")
    admin.goto("/tickets/?status=open")
    chip = page.locator(f'a[data-run-status="{settled.pk}"]')
    assert chip.inner_text() == f"#{settled.pk} Needs follow-up"
    no_sideways_scroll(admin)
