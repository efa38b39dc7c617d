"""Charged twice: refund a real duplicate capture, or explain a pending authorization."""

from __future__ import annotations

from .conversation import Answer, Conversation, Plan
from .helpers import (
    dec,
    finish,
    letter,
    need_order,
    note_then_reply,
    once,
    reply_once,
)


def plan_duplicate(c: Conversation) -> Plan:
    kb = ("search_kb", {"query": "duplicate charge pending authorization"}, "billing policy")
    order = need_order(
        c, "The customer reports a double charge. I'll compare the order's captured payments.", kb
    )
    if not isinstance(order, dict):
        return order or Answer("I could not tell which order was charged; ask for it.")
    oid = order["order_id"]
    payments = order.get("payments") or []
    extra = dec(order.get("captured_amount")) - dec(order.get("total"))
    refunded = dec(order.get("refunded_amount"))
    due = extra - refunded
    if extra > 0 and due > 0:
        second = payments[-1]["reference"] if len(payments) > 1 else "second capture"
        plan = once(
            c,
            "issue_refund",
            {"order_id": oid, "amount": float(due), "reason": f"Duplicate charge {second}."},
            f"refund the duplicate {due} on {oid}",
            f"{oid} totals {order.get('total')} but {order.get('captured_amount')} was "
            f"captured in {len(payments)} payments: a real duplicate. I'll refund {due}.",
        )
        if plan:
            return plan
        if "issue_refund" in c.unavailable:
            return finish(c, f"{oid} was charged twice; the duplicate {due} should be refunded.")
        refund = c.ok("issue_refund")
        if refund is not None:
            plan = reply_once(
                c,
                letter(c, f"You're right, and I'm sorry: order {oid} was charged twice. "
                        f"We've refunded the duplicate {refund['amount']} "
                        f"{refund.get('currency', '')}; it shows on your statement within 3 "
                        "to 5 business days."),
                "Duplicate refunded. Now the apology to the customer.",
            )  # fmt: skip
            return plan or finish(c, f"Duplicate charge on {oid} refunded.")
        reason = c.rejected("issue_refund")
        if reason is not None:
            plan = once(
                c,
                "add_customer_note",
                {
                    "customer_id": order["customer_id"],
                    "note": f"Duplicate capture on {oid} ({due}); refund rejected by "
                    f"approver ({reason}). Needs follow-up.",
                },
                "note",
                "The approver rejected the refund; I'll note it for follow-up instead.",
            )
            return plan or finish(
                c, f"The duplicate {due} on {oid} is real but its refund was rejected ({reason})."
            )
        return finish(c, f"The shop refused the refund: {c.failed('issue_refund')}")
    if extra > 0:
        plan = reply_once(
            c,
            letter(c, f"The second charge on order {oid} was already refunded "
                    f"({order.get('refunded_amount')}); it can take 3 to 5 business days to "
                    "show on your statement."),
            "The duplicate was already refunded; I'll tell the customer.",
        )  # fmt: skip
        return plan or finish(c, f"The duplicate on {oid} was already refunded.")
    message = letter(
        c,
        f"I checked order {oid}: we captured one payment of {order.get('total')}. The second "
        "amount in your bank app is a pending card authorization, not a charge; it drops off "
        "by itself within 3 to 5 business days.",
        "If it is still there after that, reply with a screenshot and we'll take it up with "
        "the payment provider.",
    )
    plan = note_then_reply(
        c,
        order["customer_id"],
        f"Reported a duplicate charge on {oid}; only one capture found, explained pending "
        "authorizations.",
        message,
        f"{oid} has a single captured payment of {order.get('total')}, so nothing to "
        "refund: the second line is a pending authorization. I'll explain and note it.",
    )
    if plan:
        return plan
    return finish(c, f"No duplicate on {oid}: one capture only (pending authorization).")
