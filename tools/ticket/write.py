"""Write tools. Medium risk: reversible (notes, carrier traces). High risk: money,
orders and messages to the customer, which wait for a human's approval by default."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agentweb.runtime.tools import ToolContext, ToolError, tool
from agentweb.shop import actions
from agentweb.shop import actions as shop

from ._context import author, idempotency_key

#: Refunds below this amount are small goodwill gestures and go through without approval;
#: from this amount up (and whenever the amount is not a clean number) a human approves.
REFUND_APPROVAL_THRESHOLD = Decimal("20.00")
#: The bundled rule: the threshold is on the total refunded per order, so ten refunds of
#: 19.99 on one order need a person from the second (earlier ones in any run count).
REFUND_APPROVAL_RULE = {"argument": "amount", "at_least": 20, "sum_per": "order_id"}


def check_refund(arguments: dict[str, Any]) -> None:
    """What a refund must mean, also after a person edited it: an amount above zero and at
    most what can still be refunded on the order."""
    try:
        value = shop.parse_amount(arguments.get("amount"))
        order = shop.find_order(str(arguments.get("order_id") or ""))
    except shop.ShopRuleError as exc:
        raise ToolError(str(exc)) from None
    refunded = order.refunded_amount()
    remaining = order.captured_amount - refunded
    if value > remaining:
        raise ToolError(
            f"A refund of {shop.money(value)} {order.currency} exceeds what can be refunded "
            f"on order {order.number}: at most {shop.money(remaining)} remains."
        )


@tool(risk="high", approval=REFUND_APPROVAL_RULE, check=check_refund)
def issue_refund(
    order_id: str, amount: float, reason: str, *, ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Refund money on an order to the original payment method.

    The refund can not exceed the amount captured minus earlier refunds. Refunds that
    bring the order's refunds to 20.00 or more need a human's approval.

    Args:
        order_id: The order id, e.g. "A1001".
        amount: The amount to refund in the order's currency, e.g. 24.99.
        reason: Why, in a sentence (kept in the refunds ledger).
    """
    return actions.issue_refund(order_id, amount, reason, key=idempotency_key(ctx))


@tool(risk="high")
def cancel_order(order_id: str, reason: str, *, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Cancel an order that has not shipped yet; the captured payment is refunded in full.

    Args:
        order_id: The order id, e.g. "A1001".
        reason: Why the order is cancelled, in a sentence.
    """
    return actions.cancel_order(order_id, reason, key=idempotency_key(ctx))


@tool(risk="high")
def update_shipping_address(
    order_id: str, address: str, *, ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Change the shipping address of an order that has not shipped yet.

    Args:
        order_id: The order id, e.g. "A1001".
        address: The complete new address: street and number, postal code, city, country.
    """
    return actions.update_shipping_address(order_id, address, key=idempotency_key(ctx))


@tool(risk="high")
def send_customer_reply(
    customer_id: str | None = None, *, message: str, ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Reply to the customer of the ticket being worked on, through the ticket's channel
    (their mailbox or helpdesk).

    The reply goes to the ticket's requester. Without a ticket, name the customer.

    Args:
        customer_id: Optional: the customer id, e.g. "C001"; when given it must be the
            ticket's customer. Needed only when the run has no ticket.
        message: The full text of the reply, written to the customer.
    """
    return actions.send_customer_reply(
        customer_id,
        message,
        ticket_id=ctx.subject if ctx else None,
        key=idempotency_key(ctx),
        author=author(ctx),
        run_id=int(ctx.run_id) if ctx and ctx.run_id and ctx.run_id.isdigit() else None,
    )


@tool(risk="medium")
def add_customer_note(
    customer_id: str, note: str, *, ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Add an internal note to the customer's record (not visible to the customer).

    Args:
        customer_id: The customer id, e.g. "C001".
        note: The note, in a sentence or two.
    """
    return actions.add_customer_note(
        customer_id, note, author=author(ctx), key=idempotency_key(ctx)
    )


@tool(risk="medium")
def escalate_to_carrier(
    tracking_number: str, reason: str, *, ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Open a trace with the carrier for a lost, late or misdelivered parcel.

    Args:
        tracking_number: The carrier tracking number, e.g. "1Z999AA10123456784".
        reason: What the carrier should investigate.
    """
    return actions.escalate_to_carrier(tracking_number, reason, key=idempotency_key(ctx))
