"""Every demo scenario end to end: the real loop, the demo model, the bundled tools, the
seeded shop, human decisions in between; each ends in the expected state of the shop."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from agentweb.runtime.loop import Agent, AgentConfig, Decision, Finished, NeedsApproval
from agentweb.runtime.tools import load_tools
from agentweb.shop.demo_data import seed_shop
from agentweb.shop.models import (
    CarrierEscalation,
    Customer,
    CustomerFact,
    CustomerNote,
    Order,
    Refund,
)
from agentweb.shop.validators import validator_for_ticket
from agentweb.tickets.models import Message, Ticket
from tools.ticket.demo import DemoModel

pytestmark = pytest.mark.django_db(transaction=True)

READ_ONLY = [
    "get_order", "track_shipment", "get_customer", "get_customer_notes", "check_inventory",
    "search_kb", "recall_customer_facts",
]  # fmt: skip


@dataclass
class Played:
    ticket: Ticket
    outcome: Any
    events: list[Any] = field(default_factory=list)
    approvals: list[str] = field(default_factory=list)
    states_at_approval: list[dict[str, int]] = field(default_factory=list)

    @property
    def tools(self) -> list[str]:
        return [e.data["tool"] for e in self.events if e.type == "tool_call_started"]

    @property
    def proposed(self) -> list[str]:
        """Every call the model asked for, including rejected ones."""
        return [
            c["name"] for e in self.events if e.type == "model_called" for c in e.data["tool_calls"]
        ]

    @property
    def answer(self) -> str:
        assert isinstance(self.outcome, Finished), self.outcome
        return self.outcome.answer

    def errors(self) -> list[str]:
        return [
            e.data["error"]
            for e in self.events
            if e.type == "tool_call_finished" and not e.data["ok"]
        ]


def _counts(order: Order | None) -> dict[str, int]:
    return {
        "refunds": Refund.objects.filter(order=order).count() if order else 0,
        "replies": Message.objects.filter(direction="out").count(),
    }


def play(
    subject: str,
    approve: Callable[[str], bool] | bool = True,
    *,
    comment: str = "Not within policy.",
    allowed_tools: list[str] | None = None,
    task_format: str = "lead",
    run_id: str | None = None,
) -> Played:
    """Run the ticket with ``subject`` to the end, deciding approvals with ``approve``."""
    seed_shop()
    ticket = Ticket.objects.get(subject=subject)
    customer = Customer.objects.get(code=ticket.customer_id)
    order = Order.objects.filter(number=ticket.fields.get("order_id")).first()
    if task_format == "lead":  # what the runs app sends: ids in the system prompt
        system = (
            "You are the ticket assistant. It is 2026-11-29 10:00 UTC.\n"
            f"The ticket in front of you:\n{ticket.as_prompt()}"
        )
        task = ticket.as_task()
    else:  # everything in the task: who, which order, what they wrote
        head = f"Ticket #{ticket.pk} from customer {customer.code} ({customer.name})"
        if order is not None:
            head += f" about order {order.number}"
        system, task = "", f"{head}\nSubject: {ticket.subject}\n\n{ticket.first_body()}"
    agent = Agent(
        DemoModel(),
        load_tools(["tools.ticket"]),
        AgentConfig(system_prompt=system, allowed_tools=allowed_tools),
        validator=validator_for_ticket(ticket.pk),
    )
    state = agent.start(task, context={"subject": ticket.pk, "run_id": run_id or f"t{ticket.pk}"})
    played = Played(ticket, None)
    decide = approve if callable(approve) else (lambda tool: approve)
    for _ in range(30):
        result = agent.step(state)
        played.events += result.events
        if isinstance(result.outcome, NeedsApproval):
            played.states_at_approval.append(_counts(order))
            decisions = []
            for pending in result.outcome.calls:
                played.approvals.append(pending.tool)
                ok = decide(pending.tool)
                decisions.append(Decision(call_id=pending.call_id, approved=ok, comment=comment))
            played.events += agent.decide(state, decisions)
            continue
        if result.outcome is not None:
            played.outcome = result.outcome
            break
    assert isinstance(played.outcome, Finished), played.outcome
    assert played.outcome.decided_by == "validator"
    return played


def reply_to(customer_code: str) -> Message:
    return Message.objects.get(
        direction="out", ticket__fields__contains={"customer_id": customer_code}
    )


# --- delivery -----------------------------------------------------------------------


def test_it_traces_a_parcel_marked_delivered_but_not_received():
    p = play("Package marked delivered but I never got it")
    assert p.tools == [
        "get_order", "track_shipment", "get_customer_notes", "recall_customer_facts",
        "escalate_to_carrier", "remember_customer_fact", "send_customer_reply",
    ]  # fmt: skip
    trace = CarrierEscalation.objects.get(shipment__order__number="A1001")
    assert "never arrived" in trace.reason
    fact = CustomerFact.objects.get(customer__code="C001", key="last_carrier_trace")
    assert trace.reference in fact.value and fact.source_run == f"t{p.ticket.pk}"
    assert trace.reference in reply_to("C001").body
    assert p.approvals == ["send_customer_reply"]
    assert not Refund.objects.filter(order__number="A1001").exists()
    assert trace.reference in p.answer


def test_it_flags_an_earlier_missing_parcel_claim():
    p = play("Tracking says delivered, nothing here")
    assert "1 earlier missing-parcel claim" in p.answer
    assert "team lead" in p.answer
    assert not Refund.objects.filter(order__number="A1002").exists()


def test_it_tells_where_a_moving_parcel_is():
    # Without today's date (no system prompt) the parcel is simply on its way.
    p = play("Where is my order?", task_format="as_task")
    assert p.tools == ["get_order", "track_shipment", "send_customer_reply"]
    assert "expects to deliver it by 2026-11-25" in reply_to("C003").body
    assert not CarrierEscalation.objects.exists()


def test_it_traces_a_parcel_past_its_delivery_date():
    # The system prompt says it is 2026-11-29: four days after the expected delivery.
    p = play("Where is my order?")
    assert p.tools == ["get_order", "track_shipment", "escalate_to_carrier", "send_customer_reply"]
    trace = CarrierEscalation.objects.get(shipment__order__number="A1003")
    assert "4 days late" in trace.reason
    message = reply_to("C003").body
    assert "running late" in message and trace.reference in message


def test_it_escalates_a_parcel_stuck_with_an_exception():
    play("Order is late, tracking has not moved")
    trace = CarrierEscalation.objects.get(shipment__order__number="A1004")
    assert trace.reference in reply_to("C004").body


# --- damage -------------------------------------------------------------------------


def test_it_refunds_a_damaged_item_only_after_approval():
    p = play("Teapot arrived cracked")
    assert p.approvals == ["issue_refund", "send_customer_reply"]
    assert p.states_at_approval[0]["refunds"] == 0  # nothing happened while waiting
    refund = Refund.objects.get(order__number="A1005")
    assert refund.amount == Decimal("38.00")
    assert "38.00" in reply_to("C005").body


def test_it_explains_instead_of_retrying_a_rejected_damage_refund():
    p = play("Teapot arrived cracked", approve=False, comment="Ask for a photo first.")
    assert not Refund.objects.filter(order__number="A1005").exists()
    assert p.proposed.count("issue_refund") == 1
    assert "Ask for a photo first" in p.answer and "rejected" in p.answer
    assert CustomerNote.objects.filter(customer__code="C005", body__contains="rejected").exists()
    assert not Message.objects.filter(direction="out").exists()


def test_it_refunds_a_small_damage_without_approval():
    p = play("One mug broken")
    assert p.approvals == ["send_customer_reply"]
    assert p.states_at_approval[0]["refunds"] == 1  # refunded before the reply was approved
    assert Refund.objects.get(order__number="A1006").amount == Decimal("14.50")


# --- orders -------------------------------------------------------------------------


def test_it_cancels_an_unshipped_order_after_approval():
    p = play("Please cancel my order")
    assert p.approvals == ["cancel_order", "send_customer_reply"]
    order = Order.objects.get(number="A1008")
    assert order.status == "cancelled"
    assert order.refunded_amount() == Decimal("149.00")
    assert "149.00" in reply_to("C008").body


def test_it_leaves_the_order_alone_when_the_cancellation_is_rejected():
    p = play("Please cancel my order", approve=lambda tool: tool != "cancel_order")
    assert Order.objects.get(number="A1008").status == "paid"
    assert not Refund.objects.filter(order__number="A1008").exists()
    assert "rejected" in p.answer


def test_it_explains_that_a_shipped_order_cannot_be_cancelled():
    p = play("Cancel A1010")
    assert "cancel_order" not in p.tools
    assert Order.objects.get(number="A1010").status == "shipped"
    assert "can no longer cancel" in reply_to("C010").body
    assert "30 days" in reply_to("C010").body


def test_it_changes_the_address_before_shipping():
    play("New address for my order")
    order = Order.objects.get(number="A1011")
    assert order.shipping_address == "48 Harbor Street, Apt 3, Portland, OR 97201, USA"
    assert order.address_changes.count() == 1
    assert "48 Harbor Street" in reply_to("C011").body


def test_it_asks_the_carrier_to_redirect_a_shipped_order():
    p = play("Change the shipping address")
    assert "update_shipping_address" not in p.tools
    order = Order.objects.get(number="A1013")
    assert "77 Elm Road" not in order.shipping_address
    trace = CarrierEscalation.objects.get(shipment__order=order)
    assert "77 Elm Road, Austin, TX 78701, USA" in trace.reason
    assert trace.reference in reply_to("C013").body


# --- stock and billing --------------------------------------------------------------


def test_it_answers_an_out_of_stock_question_with_the_restock_date():
    p = play("Sleeping bag back in stock?")
    assert p.tools[:2] == ["check_inventory", "search_kb"]
    message = reply_to("C014").body
    assert "sold out" in message and "2026-12-11" in message


def test_it_confirms_an_item_in_stock():
    play("Matcha kits in stock?")
    assert "in stock right now" in reply_to("C016").body


def test_it_refunds_a_real_duplicate_charge():
    p = play("Charged twice")
    assert p.approvals[0] == "issue_refund"
    refund = Refund.objects.get(order__number="A1017")
    assert refund.amount == Decimal("88.00")
    assert "Duplicate charge" in refund.reason
    assert Order.objects.get(number="A1017").refundable_amount() == Decimal("88.00")


def test_it_explains_a_pending_authorization_instead_of_refunding():
    p = play("Duplicate charge on my card")
    assert "issue_refund" not in p.tools
    assert not Refund.objects.filter(order__number="A1018").exists()
    assert "pending card authorization" in reply_to("C018").body
    assert CustomerNote.objects.filter(customer__code="C018", body__contains="one capture")


# --- people -------------------------------------------------------------------------


def test_it_handles_an_angry_repeat_customer_with_their_history():
    p = play("THIRD time writing about my order")
    assert p.tools[:3] == ["get_customer", "get_customer_notes", "recall_customer_facts"]
    trace = CarrierEscalation.objects.get(shipment__order__number="A1019")
    message = reply_to("C019").body
    assert "4 times" in message and trace.reference in message
    assert "keep to email" in message  # the remembered preference
    # the carrier's status in words, not its code ("is exception.")
    assert "is held up by the carrier because of a delivery problem." in message
    assert "is exception" not in message and "in_transit" not in message
    fact = CustomerFact.objects.get(customer__code="C019", key="escalation_history")
    assert trace.reference in fact.value
    assert CustomerNote.objects.filter(customer__code="C019").count() == 4


def test_it_explains_a_refund_beyond_policy_that_the_approver_rejects():
    p = play(
        "Refund for rain jacket",
        approve=lambda tool: tool != "issue_refund",
        comment="Used and past 30 days; no exception.",
    )
    assert not Refund.objects.filter(order__number="A1021").exists()
    assert p.proposed.count("issue_refund") == 1  # not retried
    message = reply_to("C021").body
    assert "30 days" in message and "not able to refund" in message
    assert "rejected the exception" in p.answer
    thoughts = [e.data["text"] for e in p.events if e.type == "model_called"]
    assert any("(80 days ago)" in t for t in thoughts)
    assert "Used and past 30 days; no exception" in p.answer


def test_it_refunds_beyond_policy_when_the_approver_grants_an_exception():
    play("Money back for the throw")
    assert Refund.objects.get(order__number="A1022").amount == Decimal("79.00")
    assert "one-time exception" in reply_to("C022").body


def test_it_answers_a_general_question_from_the_kb_without_changing_anything():
    p = play("Do you ship to Canada?")
    assert p.approvals == []
    assert "international-shipping" in p.answer and "7 to 14 business days" in p.answer
    assert (
        not Message.objects.filter(direction="out").exists()
        and not Refund.objects.filter(created_at__year__gte=2027).exists()
    )


# --- variations ---------------------------------------------------------------------


def test_it_plays_from_the_ticket_text_alone():
    p = play("Teapot arrived cracked", task_format="as_task")
    assert Refund.objects.filter(order__number="A1005", amount=Decimal("38.00")).exists()
    assert p.tools[0] == "get_order"


def test_it_only_recommends_writes_with_read_only_tools():
    p = play("Teapot arrived cracked", allowed_tools=READ_ONLY)
    assert p.approvals == []
    assert not Refund.objects.filter(order__number="A1005").exists()
    assert "For a person to do" in p.answer
    assert "Refund 38.00 for the damaged Stoneware Teapot" in p.answer


def test_it_is_deterministic():
    def transcript(p: Played) -> str:
        turns = [
            (e.data["text"], [(c["name"], c["arguments"]) for c in e.data["tool_calls"]])
            for e in p.events
            if e.type == "model_called"
        ]
        # Ids the shop hands out (row ids, trace references) differ between databases.
        return re.sub(r"\b(?:ESC-[0-9A-F]{8}|[MNR]\d+)\b", "*", json.dumps(turns))

    first = play("Package marked delivered but I never got it", run_id="same")
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)
    again = play("Package marked delivered but I never got it", run_id="same")
    assert transcript(first) == transcript(again)
    ids = [c["id"] for e in first.events if e.type == "model_called" for c in e.data["tool_calls"]]
    assert len(ids) == len(set(ids)) == 7
