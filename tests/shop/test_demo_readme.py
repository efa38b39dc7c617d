"""The README's own examples, played by the `demo` model through `manage.py run_task` on the
seeded shop, get right answers (DESIGN §16): "Where is order A1001?" is a delivery
question (not the knowledge-base article on adding items), the damaged-order refund
refunds the damaged item, and a general question searches its words once and answers
only from an article about it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from agentweb.runs import actions, engine
from agentweb.runs.models import Approval, Run, RunEvent
from tools.ticket.demo.model import scenario_for

pytestmark = pytest.mark.django_db(transaction=True)  # tools run in threads of their own


@pytest.fixture
def seeded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The demo as `make run` seeds it; enqueued resumes are captured, not sent."""
    from agentweb.runs import queue

    monkeypatch.setenv(
        "AGENTWEB_DEMO_PASSWORD", os.environ.get("AGENTWEB_DEMO_PASSWORD", "pw-12345678")
    )
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    sent: list[int] = []
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: sent.append(run_id))
    yield sent


def run_task(text: str, capsys: Any) -> tuple[Run, list[str]]:
    try:
        call_command("run_task", text, "--inline")
    except SystemExit as exited:  # 3: waiting for approval (0 returns)
        assert exited.code == 3, exited.code
    run = Run.objects.order_by("-pk").first()
    assert run is not None
    return run, capsys.readouterr().out.splitlines()


def approve_all(run: Run) -> Run:
    """Approve what the run asks for (as the approver) until it ends."""
    approver = User.objects.get(username="approver")
    for _ in range(5):
        run.refresh_from_db()
        if run.status != Run.Status.WAITING_APPROVAL:
            return run
        for approval in Approval.objects.filter(run=run, status="pending"):
            actions.do_decide_approval(approval_id=approval.pk, user=approver, decision="approve")
        engine.execute_run(run.pk)
    run.refresh_from_db()
    return run


def calls(run: Run) -> list[tuple[str, dict[str, Any]]]:
    return [
        (e.data["tool"], e.data["arguments"])
        for e in RunEvent.objects.filter(run=run, type="tool_call_started").order_by("seq")
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Where is order A1001?",
        "Where's my parcel? Order A1002",
        "What is the status of order A1003?",
        "Has my order shipped yet?",
        "where is my package",
    ],
)
def test_a_delivery_question_is_one_however_it_is_worded(text: str) -> None:
    assert scenario_for(text) == "where_is"


def test_where_is_order_a1001_says_where_it_is(seeded: list[int], capsys: Any) -> None:
    run, out = run_task("Where is order A1001?", capsys)
    done = calls(run)
    assert [t for t, _ in done][:2] == ["get_order", "track_shipment"]
    assert "search_kb" not in [t for t, _ in done]  # not a knowledge-base question
    assert "escalate_to_carrier" not in [t for t, _ in done]  # nobody said it is missing
    (reply,) = Approval.objects.filter(run=run, tool="send_customer_reply")
    message = reply.arguments["message"]
    assert "Your order A1001 was delivered on 2026-11-20 by UPS" in message
    assert "Adding or removing items" not in message
    run = approve_all(run)
    assert run.status == "succeeded", run.failure_reason
    assert run.final_answer.startswith("Order A1001 was delivered on 2026-11-20")
    assert not RunEvent.objects.filter(run=run, type="completion_objected").exists()
    assert any("get_order" in line and "A1001" in line for line in out)


def test_the_damaged_order_example_refunds_the_damaged_item(seeded: list[int], capsys: Any) -> None:
    run, _ = run_task("Order A1001 arrived damaged, customer wants a refund", capsys)
    (refund,) = Approval.objects.filter(run=run, tool="issue_refund")
    assert refund.arguments["order_id"] == "A1001" and refund.arguments["amount"] == 59.0
    run = approve_all(run)
    assert run.status == "succeeded", run.failure_reason
    assert [t for t, _ in calls(run)].count("issue_refund") == 1
    assert "59.00" in run.final_answer


def test_a_general_question_is_searched_once_and_answered_from_its_article(
    seeded: list[int], capsys: Any
) -> None:
    run, _ = run_task("What is your return policy?", capsys)
    (search,) = [a for t, a in calls(run) if t == "search_kb"]
    assert search == {"query": "What is your return policy?"}  # the task once, not twice
    assert run.status == "succeeded"
    assert '"Return policy: 30 days, unused items" (return-policy)' in run.final_answer
    run, _ = run_task("Can I pay with bitcoin?", capsys)
    assert run.final_answer.startswith("The knowledge base has no answer to this question")
    assert "needs a person" in run.final_answer
