"""The seeded coordinator on the seeded ticket, played by the ``demo`` model through the
real engine, the bundled ticket tools and the demo shop: two specialists in parallel,
one refund and one reply from their findings, each after a person's approval."""

from __future__ import annotations

from typing import Any

import pytest

from agentweb.runs import actions, agents
from agentweb.runs.models import Approval, Run, RunEvent
from agentweb.shop.models import Refund
from agentweb.tickets.models import Message, Ticket
from tests.runs.test_delegation import _close_pool_connections, drain  # noqa: F401
from tools.ticket.demo import scenario_for


@pytest.fixture
def shop(demo: dict[str, Any], settings: Any, enqueued: list[int]) -> dict[str, Any]:
    settings.AGENTWEB_MODEL = "demo"
    settings.AGENTWEB_TOOLS = ["tools.ticket"]
    settings.AGENTWEB_STREAM = False
    agents.registry.cache_clear()
    return demo


def _approve_all(run_ids: list[int], approver: Any) -> int:
    pending = Approval.objects.filter(run_id__in=run_ids, status="pending")
    for approval in pending:
        actions.do_decide_approval(approval_id=approval.pk, user=approver, decision="approve")
    return len(pending)


def test_the_coordinator_splits_the_ticket_and_writes_one_reply(shop, enqueued) -> None:
    ticket = Ticket.objects.get(fields__order_id="A1026")
    # The ticket assistant would play one scenario; the coordinator splits it.
    assert scenario_for(f"{ticket.subject}\n\n{ticket.first_body()}") == "duplicate_charge"
    run = actions.do_create_run(
        user=shop["operator"], task="", agent_name="coordinator", ticket_id=ticket.pk
    )
    drain(enqueued)
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING_APPROVAL, run.failure_reason
    children = {c.agent.name: c for c in run.children.select_related("agent")}
    assert set(children) == {"shipping-specialist", "billing-specialist"}
    assert {c.status for c in children.values()} == {Run.Status.SUCCEEDED}
    assert all(c.ticket_id == ticket.pk for c in children.values())
    # The children carry the ticket for the tools' checks; the ticket's active run is the top.
    assert actions.active_run_for_ticket(ticket.pk) == run.pk
    billing = children["billing-specialist"].final_answer
    assert "Due back: " in billing and "duplicate" in billing
    assert "UPS" in children["shipping-specialist"].final_answer
    # A child saw its task and its own prompt, not the coordinator's conversation.
    child_events = RunEvent.objects.filter(run=children["billing-specialist"])
    assert "delegate_task" not in str(list(child_events.values_list("data", flat=True)))
    # Refund (the billing finding) first, then the one reply; each approved by a person.
    for _ in range(3):
        if not _approve_all([run.pk], shop["approver"]):
            break
        drain(enqueued)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.failure_reason
    refunds = Refund.objects.filter(order__number="A1026")
    assert refunds.count() == 1
    reply = Message.objects.get(ticket=ticket, direction="out")
    assert "UPS" in reply.body and "refunded the duplicate" in reply.body
    types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    assert types.count("subtask_started") == 2 and types.count("subtask_finished") == 2
    assert run.usage["children"]["model_calls"] >= 4
