"""An item arrived damaged: refund it without a return (approval from 20.00), tell the customer."""

from __future__ import annotations

import re
from typing import Any

from .conversation import Answer, Conversation, Plan
from .helpers import (
    dec,
    finish,
    letter,
    need_order,
    once,
    reply_once,
)


def pick_item(c: Conversation, order: dict[str, Any]) -> dict[str, Any]:
    items = order.get("items") or []
    best, best_score = items[0], 0
    for item in items:
        words = [w for w in re.findall(r"[a-z]{4,}", item["name"].lower())]
        score = sum(1 for w in words if w in c.text or w.rstrip("s") in c.text)
        if score > best_score:
            best, best_score = item, score
    return best


def plan_damaged(c: Conversation) -> Plan:
    kb = ("search_kb", {"query": "damaged broken item refund"}, "check the damage policy")
    order = need_order(
        c,
        "The customer received a damaged item. I'll pull up the order and our damage policy.",
        kb,
    )
    if not isinstance(order, dict):
        return order or Answer("I could not tell which order is damaged; ask for the number.")
    oid = order["order_id"]
    item = pick_item(c, order)
    amount = min(dec(item["unit_price"]), dec(order.get("refundable_amount")))
    if amount <= 0:
        return finish(
            c, f"Order {oid} has nothing left to refund ({order.get('refunded_amount')} "
            "already refunded); offer a replacement instead."
        )  # fmt: skip
    args = {
        "order_id": oid,
        "amount": float(amount),
        "reason": f"{item['name']} arrived damaged; customer reported it on the ticket.",
    }
    plan = once(
        c,
        "issue_refund",
        args,
        f"refund {amount} for the damaged {item['name']} on {oid}",
        f"Our policy refunds a damaged item in full without a return. The damaged item is "
        f"the {item['name']} at {item['unit_price']}, so I'll refund {amount} on {oid}."
        + (" That needs an approver." if amount >= 20 else " That is below the approval limit."),
    )
    if plan:
        return plan
    if "issue_refund" in c.unavailable:
        return finish(
            c,
            f"The {item['name']} on order {oid} arrived damaged; our policy refunds it "
            f"({amount}) without a return. I can't make changes with the tools I have.",
        )
    refund = c.ok("issue_refund")
    if refund is not None:
        plan = reply_once(
            c,
            letter(
                c,
                f"I'm sorry your {item['name']} arrived damaged. We've refunded "
                f"{refund['amount']} {refund.get('currency', '')} to your original payment "
                "method; it shows within 3 to 5 business days.",
                "There's no need to send the broken item back. If you'd rather have a "
                "replacement, just reply and we'll ship one.",
            ),
            f"The refund went through ({refund.get('refund_id')}). Now the reply to the customer.",
        )
        return plan or finish(
            c, f"Refunded the damaged {item['name']} on order {oid} and told the customer."
            if c.ok("send_customer_reply") else
            f"Refunded the damaged {item['name']} on order {oid}; the reply was not sent."
        )  # fmt: skip
    reason = c.rejected("issue_refund")
    if reason is not None:
        plan = once(
            c,
            "add_customer_note",
            {
                "customer_id": order["customer_id"],
                "note": f"Damaged {item['name']} on {oid}: refund of {amount} proposed, "
                f"rejected by approver ({reason}). Offer a replacement instead.",
            },
            "note the decision",
            "The approver rejected the refund, so I won't retry it. I'll note the decision "
            "for the team.",
        )
        if plan:
            return plan
        return finish(
            c,
            f"The refund for the damaged {item['name']} on {oid} was rejected ({reason}), so "
            "no money was returned. Suggest offering a free replacement; I have not written "
            "to the customer yet.",
        )
    return finish(
        c,
        f"The shop refused the refund on {oid}: {c.failed('issue_refund')}. Nothing was "
        "refunded; check the order's payments before trying again.",
    )
