"""Every rule of the shop refuses with a message that says why (tools called directly)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agentweb.runtime.approvals import ApprovalGate
from agentweb.shop.actions import ShopRuleError
from agentweb.shop.models import (
    AddressChange,
    CarrierEscalation,
    Order,
    Refund,
)
from agentweb.tickets.models import Message, Ticket


def asks_person(tool, args):
    """What an agent's approval gate says of a call of ``tool`` (no profile rules)."""
    return ApprovalGate().verdict(tool, args, tool.risk, None, {}).person


CONTRACT = {
    "get_order": ("low", ["order_id"]),
    "track_shipment": ("low", ["tracking_number"]),
    "get_customer": ("low", ["customer_id"]),
    "get_customer_notes": ("low", ["customer_id"]),
    "check_inventory": ("low", ["sku"]),
    "search_kb": ("low", ["query"]),
    "recall_customer_facts": ("low", ["customer_id"]),
    "add_customer_note": ("medium", ["customer_id", "note"]),
    "escalate_to_carrier": ("medium", ["tracking_number", "reason"]),
    "remember_customer_fact": ("medium", ["customer_id", "key", "value"]),
    "issue_refund": ("high", ["order_id", "amount", "reason"]),
    "cancel_order": ("high", ["order_id", "reason"]),
    "update_shipping_address": ("high", ["order_id", "address"]),
    "send_customer_reply": ("high", ["customer_id", "message"]),
}


def test_it_exposes_exactly_the_contracted_tools(registry):
    assert sorted(registry.names()) == sorted(CONTRACT)
    for name, (risk, params) in CONTRACT.items():
        tool = registry.get(name)
        assert tool.risk == risk, name
        assert list(tool.params) == params, name
        assert "ctx" not in tool.schema["properties"]
        assert tool.description


def test_it_asks_approval_for_high_risk_and_refunds_from_20(registry):
    refund = registry.get("issue_refund")
    assert not asks_person(refund, {"order_id": "A1", "amount": 19.99, "reason": "x"})
    assert asks_person(refund, {"order_id": "A1", "amount": 20, "reason": "x"})
    assert asks_person(refund, {"order_id": "A1", "amount": "lots", "reason": "x"})
    assert asks_person(refund, {"order_id": "A1", "amount": "NaN", "reason": "x"})
    for name in ("cancel_order", "update_shipping_address", "send_customer_reply"):
        assert asks_person(registry.get(name), {})
    for name in ("add_customer_note", "escalate_to_carrier", "get_order"):
        assert not asks_person(registry.get(name), {})


# --- refunds ------------------------------------------------------------------------


def test_it_refunds_within_the_captured_amount(shop, call):
    result = call("issue_refund", order_id="a1003", amount=30, reason="Late delivery")
    assert result["amount"] == "30.00"
    assert result["remaining_refundable"] == "50.00"
    refund = Refund.objects.get()
    assert refund.amount == Decimal("30.00")
    assert refund.idempotency_key == "run1:call_1"


def test_it_refuses_a_refund_above_the_captured_amount(shop, call):
    with pytest.raises(ShopRuleError, match=r"80\.00 was captured.*at most 80\.00 remains"):
        call("issue_refund", order_id="A1003", amount=80.01, reason="Too much")
    assert not Refund.objects.exists()


def test_it_counts_earlier_refunds_against_the_limit(shop, call):
    call("issue_refund", call_id="c1", order_id="A1003", amount=60, reason="Part one")
    with pytest.raises(ShopRuleError, match=r"60\.00 already refunded, so at most 20\.00"):
        call("issue_refund", call_id="c2", order_id="A1003", amount=25, reason="Part two")
    call("issue_refund", call_id="c3", order_id="A1003", amount=20, reason="The rest")
    assert shop["delivered"].refunded_amount() == Decimal("80.00")


def test_it_refuses_a_refund_when_nothing_was_captured(shop, call):
    with pytest.raises(ShopRuleError, match="Nothing has been captured on order A1004"):
        call("issue_refund", order_id="A1004", amount=5, reason="Goodwill")


@pytest.mark.parametrize(
    ("amount", "message"),
    [(0, "must be positive"), (-5, "must be positive"), (1.234, "more than two decimal")],
)
def test_it_refuses_bad_amounts(shop, call, amount, message):
    with pytest.raises(ShopRuleError, match=message):
        call("issue_refund", order_id="A1003", amount=amount, reason="Bad amount")


def test_it_explains_an_unknown_order(shop, call):
    with pytest.raises(ShopRuleError, match=r"No order with id 'Z9'.*look like 'A1001'"):
        call("issue_refund", order_id="Z9", amount=5, reason="Who?")
    with pytest.raises(ShopRuleError, match="No order with id"):
        call("get_order", order_id="A9999")


def test_it_requires_a_refund_reason(shop, call):
    with pytest.raises(ShopRuleError, match="refund reason is empty"):
        call("issue_refund", order_id="A1003", amount=5, reason="  ")


# --- cancellation -------------------------------------------------------------------


def test_it_cancels_before_shipping_and_refunds_the_payment(shop, call):
    result = call("cancel_order", order_id="A1001", reason="Wrong size")
    assert result["status"] == "cancelled"
    assert result["refunded"] == "50.00"
    order = Order.objects.get(number="A1001")
    assert order.status == "cancelled"
    assert order.cancel_reason == "Wrong size"
    assert order.refunded_amount() == Decimal("50.00")


def test_it_cancels_an_unpaid_order_without_a_refund(shop, call):
    assert call("cancel_order", order_id="A1004", reason="Changed mind")["refunded"] == "0.00"
    assert not Refund.objects.exists()


@pytest.mark.parametrize(("number", "status"), [("A1002", "shipped"), ("A1003", "delivered")])
def test_it_refuses_to_cancel_after_shipping(shop, call, number, status):
    with pytest.raises(ShopRuleError, match=rf"can no longer be cancelled: it is {status}"):
        call("cancel_order", order_id=number, reason="Too late")
    assert Order.objects.get(number=number).status == status


def test_it_refuses_to_cancel_twice(shop, call):
    call("cancel_order", call_id="c1", order_id="A1001", reason="Wrong size")
    with pytest.raises(ShopRuleError, match="already cancelled"):
        call("cancel_order", call_id="c2", order_id="A1001", reason="Again")


# --- address ------------------------------------------------------------------------


def test_it_changes_the_address_before_shipping(shop, call):
    new = "48 Harbor Street, Portland, OR 97201, USA"
    result = call("update_shipping_address", order_id="A1001", address=new)
    assert result["status"] == "updated"
    assert Order.objects.get(number="A1001").shipping_address == new
    change = AddressChange.objects.get()
    assert change.old_address.startswith("1 Old Road")


def test_it_refuses_an_address_change_after_shipping(shop, call):
    with pytest.raises(ShopRuleError, match=r"can no longer be changed: it is shipped.*redirect"):
        call("update_shipping_address", order_id="A1002", address="9 New Street, Austin 78701")
    assert not AddressChange.objects.exists()


def test_it_refuses_an_address_change_on_a_cancelled_order(shop, call):
    call("cancel_order", call_id="c1", order_id="A1001", reason="Wrong size")
    with pytest.raises(ShopRuleError, match="is cancelled"):
        call("update_shipping_address", call_id="c2", order_id="A1001", address="9 New St, X 1")


@pytest.mark.parametrize(
    ("address", "message"),
    [("", "new address is empty"), ("Main St", "too short"), ("Somewhere, Nice", "incomplete")],
)
def test_it_refuses_an_incomplete_address(shop, call, address, message):
    with pytest.raises(ShopRuleError, match=message):
        call("update_shipping_address", order_id="A1001", address=address)


# --- replies ------------------------------------------------------------------------


def test_it_replies_to_the_tickets_customer(shop, call):
    ticket = shop["ticket"]
    result = call(
        "send_customer_reply", ticket_id=str(ticket.pk), customer_id="C001", message="Hello Ada"
    )
    assert result["to"] == "c001@example.com"
    assert result["ticket_id"] == str(ticket.pk) and result["customer_id"] == "C001"
    reply = Message.objects.get(direction="out")
    assert reply.ticket == ticket and reply.body == "Hello Ada"
    assert result["reply_id"] == f"M{reply.pk}"
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.PENDING


def test_it_replies_to_the_requester_without_a_customer_id(shop, call):
    ticket = shop["ticket"]
    result = call("send_customer_reply", ticket_id=str(ticket.pk), message="Hello Ada")
    assert result["to"] == "c001@example.com" and result["ticket_id"] == str(ticket.pk)
    assert Message.objects.get(direction="out").ticket == ticket


def test_without_a_ticket_a_reply_opens_one_for_the_named_customer(shop, call):
    result = call("send_customer_reply", customer_id="c002", message="About your order")
    ticket = Ticket.objects.get(pk=int(result["ticket_id"]))
    assert ticket.fields == {"customer_id": "C002"} and ticket.requester_email == "c002@example.com"
    assert [(m.direction, m.body) for m in ticket.thread()] == [("out", "About your order")]
    with pytest.raises(ShopRuleError, match="needs a customer_id"):
        call("send_customer_reply", call_id="call_2", message="To whom?")


def test_on_a_ticket_without_a_customer_id_only_the_requesters_customer_fits(shop, call):
    from tests.tickets.factories import make_ticket

    ticket = make_ticket(source="email", requester_email="C002@example.com")
    with pytest.raises(ShopRuleError, match="not by customer C001"):
        call("send_customer_reply", ticket_id=str(ticket.pk), customer_id="C001", message="Hi")
    result = call(
        "send_customer_reply", call_id="call_2", ticket_id=str(ticket.pk), customer_id="C002",
        message="Hi",
    )  # fmt: skip
    assert result["to"] == "C002@example.com"


def test_it_refuses_a_reply_to_another_customer(shop, call):
    ticket = shop["ticket"]
    with pytest.raises(ShopRuleError, match=r"belongs to customer C001.*only go to C001, not C002"):
        call("send_customer_reply", ticket_id=str(ticket.pk), customer_id="C002", message="Hi")
    assert not Message.objects.filter(direction="out").exists()


def test_it_refuses_a_reply_on_an_unknown_ticket(shop, call):
    with pytest.raises(ShopRuleError, match="No ticket #999999"):
        call("send_customer_reply", ticket_id="999999", customer_id="C001", message="Hi")


def test_it_refuses_an_unknown_customer(shop, call):
    with pytest.raises(ShopRuleError, match=r"No customer with id 'C999'.*look like 'C001'"):
        call("send_customer_reply", customer_id="C999", message="Hi")
    with pytest.raises(ShopRuleError, match="No customer"):
        call("add_customer_note", customer_id="C999", note="Nope")


def test_it_replies_without_a_ticket_to_any_known_customer(shop, call):
    result = call("send_customer_reply", customer_id="C002", message="Hi Bob")
    assert result["ticket_id"] != str(shop["ticket"].pk) and result["to"] == "c002@example.com"


# --- carrier ------------------------------------------------------------------------


def test_it_escalates_a_parcel_once(shop, call):
    result = call("escalate_to_carrier", tracking_number="1zaaaaaa0300000001", reason="Lost")
    assert result["escalation_id"].startswith("ESC-")
    with pytest.raises(ShopRuleError, match="already escalated with UPS"):
        call(
            "escalate_to_carrier",
            call_id="c2",
            tracking_number="1ZAAAAAA0300000001",
            reason="Again",
        )
    assert CarrierEscalation.objects.count() == 1
    trace = call("track_shipment", tracking_number="1ZAAAAAA0300000001")
    assert trace["escalations"][0]["escalation_id"] == result["escalation_id"]


def test_it_refuses_to_escalate_a_parcel_the_carrier_does_not_have(shop, call):
    with pytest.raises(ShopRuleError, match="has not picked up .* yet"):
        call("escalate_to_carrier", tracking_number="1ZAAAAAA0300000003", reason="Where?")


def test_it_explains_an_unknown_tracking_number(shop, call):
    with pytest.raises(ShopRuleError, match="get_order lists the tracking numbers"):
        call("track_shipment", tracking_number="1Z000")


# --- reads and memory ---------------------------------------------------------------


def test_it_describes_an_order_with_money_as_strings(shop, call):
    call("issue_refund", order_id="A1003", amount=10, reason="Goodwill")
    order = call("get_order", order_id="A1003")
    assert order["customer_id"] == "C001"
    assert order["captured_amount"] == "80.00"
    assert order["refunded_amount"] == "10.00"
    assert order["refundable_amount"] == "70.00"
    assert order["shipments"][0]["tracking_number"] == "1ZAAAAAA0300000002"
    assert order["can_cancel_or_change_address"] is False


def test_it_suggests_skus_for_an_unknown_product(shop, call):
    with pytest.raises(ShopRuleError, match=r"Did you mean KIT-0101 \(Stoneware Teapot\)"):
        call("check_inventory", sku="teapot")
    stock = call("check_inventory", sku="kit-0101")
    assert stock["in_stock"] is False


def test_it_remembers_one_value_per_key(shop, call):
    call("remember_customer_fact", call_id="c1", customer_id="C001", key="Preferred contact",
         value="email")  # fmt: skip
    second = call(
        "remember_customer_fact", call_id="c2", customer_id="C001", key="preferred_contact",
        value="phone, mornings",
    )  # fmt: skip
    assert second["status"] == "updated"
    facts = call("recall_customer_facts", customer_id="C001")["facts"]
    assert [(f["key"], f["value"]) for f in facts] == [("preferred_contact", "phone, mornings")]


def test_it_writes_notes_the_next_colleague_reads(shop, call):
    call("add_customer_note", customer_id="C002", note="Prefers SMS")
    notes = call("get_customer_notes", customer_id="C002")["notes"]
    assert notes[0]["note"] == "Prefers SMS"
    assert notes[0]["author"] == "assistant (run run1)"
