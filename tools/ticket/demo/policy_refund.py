"""A full refund outside the return policy: ask an approver for an exception, explain either way."""

from __future__ import annotations

from .conversation import Answer, Conversation, Plan
from .helpers import (
    ago,
    day_of,
    dec,
    finish,
    letter,
    need_order,
    note_then_reply,
    once,
    reply_once,
)


def plan_policy_refund(c: Conversation) -> Plan:
    kb = ("search_kb", {"query": "return policy refund window used items"}, "check policy")
    order = need_order(
        c,
        "The customer wants a full refund for something they have had for a while. I'll "
        "check the order and our return policy.",
        kb,
    )
    if not isinstance(order, dict):
        return order or Answer("I could not tell which order this is about; ask for it.")
    oid = order["order_id"]
    shipments = order.get("shipments") or []
    delivered = day_of(shipments[-1].get("delivered_at")) if shipments else "not delivered"
    full = dec(order.get("refundable_amount"))
    items = ", ".join(i["name"] for i in order.get("items") or [])
    if full <= 0:
        return finish(c, f"Order {oid} has already been refunded in full; nothing to do.")
    plan = once(
        c,
        "issue_refund",
        {
            "order_id": oid,
            "amount": float(full),
            "reason": f"Exception request: full refund of {items}, delivered {delivered}, "
            "used by the customer; outside the 30-day return policy.",
        },
        f"refund {full} on {oid} as an exception",
        f"{oid} was delivered on {delivered}{ago(c.today, delivered)} and the customer says "
        "they used it: that is "
        "outside our 30-day, unused-items return policy. Only an approver can grant an "
        f"exception, so I'm asking for the full {full} and letting them decide.",
    )
    if plan:
        return plan
    if "issue_refund" in c.unavailable:
        return finish(
            c,
            f"{oid} (delivered {delivered}) is outside the return policy; a full refund of "
            f"{full} would need an approver's exception.",
        )
    refund = c.ok("issue_refund")
    if refund is not None:
        plan = reply_once(
            c,
            letter(
                c,
                f"Thanks for your patience. Your order {oid} is outside our 30-day return "
                "window, but we've made a one-time exception and refunded "
                f"{refund['amount']} {refund.get('currency', '')} to your original payment "
                "method. It shows within 3 to 5 business days.",
            ),
            "The approver granted the exception. I'll tell the customer.",
        )
        return plan or finish(c, f"Exception granted: full refund on {oid}.")
    reason = c.rejected("issue_refund")
    if reason is not None:
        message = letter(
            c,
            f"Thank you for telling us about the {items}. I checked your order {oid}: it was "
            f"delivered on {delivered}, and our return policy covers unused items returned "
            "within 30 days of delivery. Because this one has been used and is past that "
            "window, we're not able to refund it.",
            "I'm sorry this isn't the answer you hoped for. If something is wrong with the "
            "item itself, reply with a few details and we'll look at it again.",
        )
        plan = note_then_reply(
            c,
            order["customer_id"],
            f"Asked for a full refund of {oid} outside policy; exception rejected by approver "
            f"({reason}). Explained the return policy.",
            message,
            f"The approver rejected the exception ({reason}). I won't retry the refund; "
            "instead I'll explain the policy to the customer kindly and note it.",
        )
        if plan:
            return plan
        return finish(
            c,
            f"No refund: a full refund of {oid} is outside the return policy and the approver "
            f"rejected the exception ({reason}). "
            + (
                "I explained the policy to the customer."
                if c.ok("send_customer_reply")
                else "The explanation below still needs to reach the customer."
            ),
        )
    return finish(c, f"The shop refused the refund on {oid}: {c.failed('issue_refund')}.")
