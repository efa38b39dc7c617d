"""Writes to the demo shop, with its business rules.

Every function here is one write with its rules checked under a row lock, raising
``ShopRuleError`` with a message that says *why* when a rule forbids it. ``run_once``
makes a write idempotent: the same key twice performs it once and returns the first
result again.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentweb.runtime.tools import ToolError
from agentweb.tickets import actions as ticket_actions
from agentweb.tickets.models import Ticket

from .models import (
    AddressChange,
    CarrierEscalation,
    Customer,
    CustomerFact,
    CustomerNote,
    Order,
    Refund,
    Shipment,
    WriteRecord,
)

CENT = Decimal("0.01")


class ShopRuleError(ToolError):
    """A request the shop refuses; the message explains why and what is possible instead
    (a ``ToolError``: the model receives the message as it is)."""


# --- lookups -------------------------------------------------------------------------


def money(value: Decimal) -> str:
    return f"{value.quantize(CENT, rounding=ROUND_HALF_UP)}"


def parse_amount(value: Any) -> Decimal:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ShopRuleError(f"Amount {value!r} is not a number.") from None
    if not amount.is_finite():
        raise ShopRuleError(f"Amount {value!r} is not a number.")
    if amount <= 0:
        raise ShopRuleError(f"Amount must be positive, got {money(amount)}.")
    if amount != amount.quantize(CENT):
        raise ShopRuleError(f"Amount {value} has more than two decimal places.")
    return amount.quantize(CENT)


def normalise_code(value: str) -> str:
    return str(value).strip().upper()


def find_customer(customer_id: str) -> Customer:
    code = normalise_code(customer_id)
    try:
        return Customer.objects.get(code=code)
    except Customer.DoesNotExist:
        raise ShopRuleError(
            f"No customer with id {customer_id!r}. Customer ids look like 'C001'."
        ) from None


def find_order(order_id: str, *, lock: bool = False) -> Order:
    number = normalise_code(order_id)
    qs = Order.objects.select_related("customer")
    if lock:
        qs = qs.select_for_update(of=("self",))
    try:
        return qs.get(number=number)
    except Order.DoesNotExist:
        raise ShopRuleError(
            f"No order with id {order_id!r}. Order ids look like 'A1001'."
        ) from None


def find_shipment(tracking_number: str) -> Shipment:
    number = normalise_code(tracking_number).replace(" ", "")
    try:
        return Shipment.objects.select_related("order").get(tracking_number=number)
    except Shipment.DoesNotExist:
        raise ShopRuleError(
            f"No shipment with tracking number {tracking_number!r}. "
            "get_order lists the tracking numbers of an order."
        ) from None


def _require_text(value: str, what: str, minimum: int = 1) -> str:
    text = (value or "").strip()
    if len(text) < minimum:
        if not text:
            raise ShopRuleError(f"The {what} is empty.")
        raise ShopRuleError(f"The {what} is too short ({len(text)} characters, need {minimum}).")
    return text


# --- idempotency ---------------------------------------------------------------------


def run_once(
    tool: str, key: str | None, arguments: dict[str, Any], perform: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Perform a write once per ``key``; a repeated key returns the recorded result.

    The write and its record commit in one transaction, so a crash leaves neither. A
    concurrent duplicate loses on the unique key, rolls back its own write and returns
    the winner's result. A failed write (``ShopRuleError``) is not recorded.
    """
    if not key:
        with transaction.atomic():
            return perform()
    for attempt in range(2):
        try:
            with transaction.atomic():
                earlier = WriteRecord.objects.filter(key=key).first()
                if earlier is not None:
                    if earlier.tool != tool:
                        raise ShopRuleError(
                            f"Idempotency key {key!r} was already used by {earlier.tool}."
                        )
                    return dict(earlier.result)
                result = perform()
                WriteRecord.objects.create(
                    key=key,
                    tool=tool,
                    arguments=arguments,
                    result=result,
                    created_at=timezone.now(),
                )
                return result
        except IntegrityError:
            if attempt:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _reference(prefix: str, key: str | None) -> str:
    seed = key or uuid.uuid4().hex
    return f"{prefix}-{hashlib.sha256(seed.encode()).hexdigest()[:8].upper()}"


# --- writes --------------------------------------------------------------------------


def _create_refund(order: Order, amount: Decimal, reason: str, key: str) -> Refund:
    return Refund.objects.create(
        order=order, amount=amount, reason=reason, idempotency_key=key, created_at=timezone.now()
    )


def issue_refund(order_id: str, amount: Any, reason: str, *, key: str | None) -> dict[str, Any]:
    value = parse_amount(amount)
    why = _require_text(reason, "refund reason", minimum=3)

    def perform() -> dict[str, Any]:
        order = find_order(order_id, lock=True)
        if order.captured_amount <= 0:
            raise ShopRuleError(
                f"Nothing has been captured on order {order.number} (status {order.status}), "
                "so there is nothing to refund."
            )
        refunded = order.refunded_amount()
        remaining = order.captured_amount - refunded
        if value > remaining:
            raise ShopRuleError(
                f"A refund of {money(value)} {order.currency} exceeds what can be refunded on "
                f"order {order.number}: {money(order.captured_amount)} was captured and "
                f"{money(refunded)} already refunded, so at most {money(remaining)} remains."
            )
        refund = _create_refund(order, value, why, key or f"adhoc-{uuid.uuid4().hex}")
        return {
            "status": "refunded",
            "refund_id": f"R{refund.pk}",
            "order_id": order.number,
            "customer_id": order.customer.code,
            "amount": money(value),
            "currency": order.currency,
            "refunded_total": money(refunded + value),
            "remaining_refundable": money(remaining - value),
        }

    return run_once(
        "issue_refund", key, {"order_id": order_id, "amount": str(amount), "reason": why}, perform
    )


def cancel_order(order_id: str, reason: str, *, key: str | None) -> dict[str, Any]:
    why = _require_text(reason, "cancellation reason", minimum=3)

    def perform() -> dict[str, Any]:
        order = find_order(order_id, lock=True)
        if order.status == Order.Status.CANCELLED:
            when = f" on {order.cancelled_at:%Y-%m-%d}" if order.cancelled_at else ""
            raise ShopRuleError(f"Order {order.number} is already cancelled{when}.")
        if not order.before_shipping:
            raise ShopRuleError(
                f"Order {order.number} can no longer be cancelled: it is {order.status}. "
                "Orders can only be cancelled before they ship; offer a return once it "
                "arrives instead."
            )
        order.status = Order.Status.CANCELLED
        order.cancelled_at = timezone.now()
        order.cancel_reason = why
        order.save(update_fields=["status", "cancelled_at", "cancel_reason"])
        remaining = order.refundable_amount()
        refunded = Decimal("0.00")
        if remaining > 0:
            refund_key = f"{key}:refund" if key else f"adhoc-{uuid.uuid4().hex}"
            _create_refund(order, remaining, f"Order cancelled: {why}", refund_key)
            refunded = remaining
        return {
            "status": "cancelled",
            "order_id": order.number,
            "customer_id": order.customer.code,
            "cancelled_at": order.cancelled_at.isoformat(),
            "refunded": money(refunded),
            "currency": order.currency,
        }

    return run_once("cancel_order", key, {"order_id": order_id, "reason": why}, perform)


def update_shipping_address(order_id: str, address: str, *, key: str | None) -> dict[str, Any]:
    new_address = _require_text(address, "new address", minimum=10)
    if not any(ch.isdigit() for ch in new_address):
        raise ShopRuleError(
            "The new address looks incomplete: it has no house number or postal code."
        )

    def perform() -> dict[str, Any]:
        order = find_order(order_id, lock=True)
        if order.status == Order.Status.CANCELLED:
            raise ShopRuleError(f"Order {order.number} is cancelled; there is nothing to ship.")
        if not order.before_shipping:
            raise ShopRuleError(
                f"The address of order {order.number} can no longer be changed: it is "
                f"{order.status}. Addresses can only be changed before shipping; ask the "
                "carrier to redirect the parcel (escalate_to_carrier) instead."
            )
        old = order.shipping_address
        if old.strip() != new_address:
            AddressChange.objects.create(
                order=order, old_address=old, new_address=new_address, created_at=timezone.now()
            )
            order.shipping_address = new_address
            order.save(update_fields=["shipping_address"])
        return {
            "status": "updated" if old.strip() != new_address else "unchanged",
            "order_id": order.number,
            "customer_id": order.customer.code,
            "old_address": old,
            "new_address": new_address,
        }

    return run_once(
        "update_shipping_address", key, {"order_id": order_id, "address": new_address}, perform
    )


def send_customer_reply(
    customer_id: str | None,
    message: str,
    *,
    ticket_id: str | None,
    key: str | None,
    author: str = "assistant",
    run_id: int | None = None,
) -> dict[str, Any]:
    """Write an outgoing message to a customer: on the run's ticket when there is one
    (to its requester; ``customer_id``, when given, must be the ticket's customer), else on
    a new ticket for the customer ``customer_id`` names. Delivery is the ticket's source's
    business (``agentweb.tickets``)."""
    text = _require_text(message, "reply", minimum=2)
    wanted = normalise_code(customer_id) if customer_id and str(customer_id).strip() else ""

    def perform() -> dict[str, Any]:
        if ticket_id is not None and str(ticket_id).strip():
            ticket = _find_ticket(str(ticket_id))
            _check_recipient(ticket, wanted)
        elif wanted:
            customer = find_customer(wanted)
            ticket = ticket_actions.do_open_ticket(
                subject=f"Message from the support team to {customer.name}",
                requester_email=customer.email,
                requester_name=customer.name,
                fields={"customer_id": customer.code},
            )
        else:
            raise ShopRuleError(
                "This run has no ticket, so the reply needs a customer_id to go to (e.g. C001)."
            )
        reply = ticket_actions.do_add_outgoing(ticket, text, author=author, run_id=run_id, key=key)
        return {
            "status": "not_delivered" if reply.undelivered else "queued",
            "delivery": reply.undelivered
            or f"on its way through the ticket's {ticket.source} channel",
            "reply_id": f"M{reply.pk}",
            "customer_id": ticket.customer_id or None,
            "to": ticket.requester_email,
            "ticket_id": str(ticket.pk),
            "written_at": reply.at.isoformat(),
        }

    return run_once("send_customer_reply", key, {"customer_id": wanted, "message": text}, perform)


def _check_recipient(ticket: Ticket, wanted: str) -> None:
    """A reply on a ticket goes to its requester: a ``customer_id`` given must be the
    ticket's own customer (or, on a ticket without one, a customer with the requester's
    email address)."""
    if not wanted:
        return
    own = normalise_code(ticket.customer_id)
    if own:
        if own != wanted:
            raise ShopRuleError(
                f"Ticket #{ticket.pk} belongs to customer {own}; a reply on it may only go "
                f"to {own}, not {wanted}."
            )
        return
    customer = find_customer(wanted)
    if customer.email.lower() != ticket.requester_email.lower():
        raise ShopRuleError(
            f"Ticket #{ticket.pk} was written by {ticket.requester_email or 'someone else'}, "
            f"not by customer {customer.code}; leave customer_id out to answer its requester."
        )


def _find_ticket(ticket_id: str) -> Ticket:
    raw = ticket_id.strip().lstrip("#")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise ShopRuleError(f"Ticket id {ticket_id!r} is not a ticket number.")
    ticket = Ticket.objects.select_for_update().filter(pk=int(raw)).first()
    if ticket is None:
        raise ShopRuleError(f"No ticket #{raw}.")
    return ticket


def add_customer_note(
    customer_id: str, note: str, *, author: str, key: str | None
) -> dict[str, Any]:
    text = _require_text(note, "note", minimum=3)

    def perform() -> dict[str, Any]:
        customer = find_customer(customer_id)
        row = CustomerNote.objects.create(
            customer=customer, body=text, author=author, created_at=timezone.now()
        )
        return {
            "status": "added",
            "note_id": f"N{row.pk}",
            "customer_id": customer.code,
            "created_at": row.created_at.isoformat(),
        }

    return run_once("add_customer_note", key, {"customer_id": customer_id, "note": text}, perform)


def escalate_to_carrier(tracking_number: str, reason: str, *, key: str | None) -> dict[str, Any]:
    why = _require_text(reason, "escalation reason", minimum=3)

    def perform() -> dict[str, Any]:
        shipment = find_shipment(tracking_number)
        if shipment.status == Shipment.Status.LABEL_CREATED:
            raise ShopRuleError(
                f"{shipment.carrier} has not picked up {shipment.tracking_number} yet (only a "
                "label exists), so there is nothing to trace."
            )
        if shipment.status == Shipment.Status.RETURNED:
            raise ShopRuleError(
                f"{shipment.tracking_number} was already returned to us; no carrier trace "
                "is possible."
            )
        already = shipment.escalations.filter(status="open").first()
        if already is not None:
            raise ShopRuleError(
                f"{shipment.tracking_number} is already escalated with {shipment.carrier} "
                f"({already.reference}, opened {already.created_at:%Y-%m-%d}); wait for "
                "that trace instead of opening another."
            )
        row = CarrierEscalation.objects.create(
            shipment=shipment,
            reference=_reference("ESC", key),
            reason=why,
            created_at=timezone.now(),
        )
        return {
            "status": "escalated",
            "escalation_id": row.reference,
            "carrier": shipment.carrier,
            "tracking_number": shipment.tracking_number,
            "order_id": shipment.order.number,
            "expected_response": "within 2 business days",
        }

    return run_once(
        "escalate_to_carrier", key, {"tracking_number": tracking_number, "reason": why}, perform
    )


def remember_customer_fact(
    customer_id: str, fact_key: str, value: str, *, run_id: str | None, key: str | None
) -> dict[str, Any]:
    name = "_".join(_require_text(fact_key, "fact key").lower().split())[:80]
    text = _require_text(value, "fact value")

    def perform() -> dict[str, Any]:
        customer = find_customer(customer_id)
        fact, created = CustomerFact.objects.update_or_create(
            customer=customer,
            key=name,
            defaults={"value": text, "source_run": run_id or "", "updated_at": timezone.now()},
        )
        return {
            "status": "remembered" if created else "updated",
            "customer_id": customer.code,
            "key": fact.key,
            "value": fact.value,
        }

    return run_once(
        "remember_customer_fact",
        key,
        {"customer_id": customer_id, "key": name, "value": text},
        perform,
    )
