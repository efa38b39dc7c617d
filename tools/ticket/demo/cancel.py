"""Cancel an order: before shipping with approval; after, explain the return."""

from __future__ import annotations

from .conversation import Act, Answer, Conversation, Plan
from .helpers import (
    day_of,
    days_between,
    dec,
    finish,
    letter,
    need_order,
    once,
    reply_once,
    short_reason,
)


def plan_cancel(c: Conversation) -> Plan:
    order = need_order(c, "The customer wants to cancel. I'll check whether the order shipped.")
    if not isinstance(order, dict):
        return order or Answer("I could not tell which order to cancel; ask for the number.")
    oid, status = order["order_id"], order.get("status")
    if status == "cancelled":
        plan = reply_once(
            c,
            letter(c, f"Good news: your order {oid} is already cancelled and any payment "
                    "was returned."),
            "The order is already cancelled; I'll confirm that to the customer.",
        )  # fmt: skip
        return plan or finish(c, f"Order {oid} was already cancelled.")
    if order.get("can_cancel_or_change_address"):
        plan = once(
            c,
            "cancel_order",
            {"order_id": oid, "reason": short_reason(c)},
            f"cancel {oid}",
            f"{oid} is {status} and hasn't shipped, so it can still be cancelled; the payment "
            "is refunded automatically. Cancelling needs approval.",
        )
        if plan:
            return plan
        if "cancel_order" in c.unavailable:
            return finish(c, f"{oid} is {status} and can still be cancelled.")
        done = c.ok("cancel_order")
        if done is not None:
            refunded = dec(done.get("refunded"))
            money = (
                f"The {done['refunded']} {done.get('currency', '')} you paid goes back to your "
                "original payment method within 3 to 5 business days."
                if refunded > 0
                else "You were not charged for it."
            )
            plan = reply_once(
                c,
                letter(c, f"Your order {oid} is cancelled. {money}"),
                "Cancelled. Now the confirmation to the customer.",
            )
            return plan or finish(c, f"Order {oid} cancelled at the customer's request.")
        reason = c.rejected("cancel_order")
        if reason is not None:
            return finish(
                c,
                f"The cancellation of {oid} was rejected by the approver ({reason}); the "
                "order stays as it is and I have not written to the customer.",
            )
        error = c.failed("cancel_order")
        return finish(c, f"The shop refused to cancel {oid}: {error}")
    shipments = order.get("shipments") or []
    if shipments and not c.tried("track_shipment"):
        return Act(
            [("track_shipment", {"tracking_number": shipments[-1]["tracking_number"]}, "ETA")],
            f"{oid} is already {status}, so it can't be cancelled any more. I'll check when "
            "it arrives so I can explain the return option.",
        )
    track = c.ok("track_shipment") or {}
    eta = track.get("estimated_delivery")
    arrival = (
        f"It was delivered on {day_of(track.get('delivered_at'))}."
        if status == "delivered"
        else f"It's on its way and should arrive by {day_of(eta)}."
        if eta and days_between(eta, c.today) <= 0
        else "It's already on its way to you."
    )
    plan = reply_once(
        c,
        letter(
            c,
            f"I'm sorry, your order {oid} has already shipped, so we can no longer cancel "
            f"it. {arrival}",
            "Once you have it, you can return any unused items within 30 days for a full "
            "refund; start the return from your account and we'll email you a prepaid label.",
        ),
        "I'll explain that it's too late to cancel and how the return works.",
    )
    return plan or finish(
        c, f"Order {oid} was already {status}, so it could not be cancelled; return explained."
    )
