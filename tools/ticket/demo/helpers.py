"""Pieces every scenario shares: dates and money, letters to the customer, the
look-up of the order, one-time actions, and the final summary of what the shop confirmed."""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from .conversation import SIGNATURE, Act, Answer, Conversation, Plan


def dec(value: Any) -> Decimal:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return Decimal("0")


def day_of(iso: Any) -> str:
    return str(iso)[:10] if iso else "an unknown date"


def days_between(first: Any, second: Any) -> int:
    """Days from ``first`` to ``second`` (ISO dates); 0 when either is unknown."""
    try:
        return (date.fromisoformat(str(second)[:10]) - date.fromisoformat(str(first)[:10])).days
    except ValueError:
        return 0


def ago(today: str | None, day: str) -> str:
    """' (80 days ago)' when both dates are known (the system prompt says what day it is)."""
    try:
        days = (date.fromisoformat(today or "") - date.fromisoformat(day)).days
    except ValueError:
        return ""
    return f" ({days} days ago)" if days > 0 else ""


def letter(c: Conversation, *paragraphs: str) -> str:
    body = "\n\n".join(p for p in paragraphs if p)
    return f"Hi {c.first_name},\n\n{body}\n\n{SIGNATURE}"


def need_order(
    c: Conversation, thought: str, *extra: tuple[str, dict[str, Any], str]
) -> Plan | dict[str, Any] | None:
    """The order of the ticket: its result, a plan to fetch it, or None when unknowable."""
    result = c.ok("get_order")
    if result is not None:
        return result
    error = c.failed("get_order")
    if error is not None:
        return Answer(
            f"I could not look up the order: {error}\n\nNext step: ask the customer to confirm "
            "the order number (it looks like A1001); nothing was changed."
        )
    order_id = c.order_id
    if order_id and not c.tried("get_order"):
        return Act([("get_order", {"order_id": order_id}, "look up the order"), *extra], thought)
    if c.customer_id and not c.tried("get_customer"):
        return Act(
            [("get_customer", {"customer_id": c.customer_id}, "find the customer's orders")],
            "The ticket doesn't name an order, so I'll look at the customer's recent orders.",
        )
    return None


def reply_once(c: Conversation, message: str, thought: str) -> Act | None:
    """Send ``message`` to the customer once; None when sent, tried, or impossible."""
    if c.tried("send_customer_reply"):
        return None
    if not c.customer_id:
        c.recommended.append(f"Send the customer this reply:\n{message}")
        return None
    return Act(
        [
            (
                "send_customer_reply",
                {"customer_id": c.customer_id, "message": message},
                f"Send the customer this reply:\n{message}",
            )
        ],
        thought,
    )


def once(c: Conversation, name: str, args: dict[str, Any], why: str, thought: str) -> Act | None:
    return None if c.tried(name) else Act([(name, args, why)], thought)


def summary_of(c: Conversation) -> str:
    """What the shop confirmed, what was refused, and what is left to a person."""
    done: list[str] = []
    not_done: list[str] = []
    for step in c.steps:
        name, args, r = step.call.name, step.call.arguments, step.result
        if step.ok:
            line = done_line(name, r)
            if line:
                done.append(line)
        elif step.rejected:
            not_done.append(f"{label_of(name, args)}: rejected by the approver ({step.error}).")
        elif step.done and name in WRITES:
            not_done.append(f"{label_of(name, args)}: the shop refused: {step.error}")
    parts = []
    parts.append(
        "Changes in the shop:\n" + "\n".join(f"- {d}" for d in done)
        if done
        else "Changes in the shop: none."
    )
    if not_done:
        parts.append("Not done:\n" + "\n".join(f"- {n}" for n in not_done))
    if c.recommended:
        parts.append(
            "For a person to do (my tools here can't):\n"
            + "\n".join(f"- {r}" for r in c.recommended)
        )
    return "\n\n".join(parts)


WRITES = {
    "issue_refund",
    "cancel_order",
    "update_shipping_address",
    "send_customer_reply",
    "add_customer_note",
    "escalate_to_carrier",
    "remember_customer_fact",
}


def label_of(name: str, args: dict[str, Any]) -> str:
    if name == "issue_refund":
        return f"Refund of {dec(args.get('amount')):.2f} on order {args.get('order_id')}"
    if name == "cancel_order":
        return f"Cancellation of order {args.get('order_id')}"
    if name == "update_shipping_address":
        return f"Address change on order {args.get('order_id')}"
    if name == "send_customer_reply":
        return "Reply to the customer"
    if name == "escalate_to_carrier":
        return f"Carrier trace for {args.get('tracking_number')}"
    return name.replace("_", " ").capitalize()


def done_line(name: str, r: dict[str, Any]) -> str | None:
    if name == "issue_refund":
        return (
            f"Refund {r.get('refund_id')}: {r.get('amount')} {r.get('currency', '')} on order "
            f"{r.get('order_id')} (to the original payment method)."
        )
    if name == "cancel_order":
        money = (
            f"{r.get('refunded')} {r.get('currency', '')} refunded to the customer"
            if dec(r.get("refunded")) > 0
            else "no payment had been captured"
        )
        return f"Order {r.get('order_id')} cancelled; {money}."
    if name == "update_shipping_address":
        return f"Shipping address of order {r.get('order_id')} is now: {r.get('new_address')}."
    if name == "send_customer_reply":
        if r.get("status") == "not_delivered":
            return f"Reply {r.get('reply_id')} written on the ticket, {r.get('delivery')}."
        return f"Reply {r.get('reply_id')} to {r.get('to')} queued for delivery."
    if name == "escalate_to_carrier":
        return (
            f"Carrier trace {r.get('escalation_id')} opened with {r.get('carrier')} for "
            f"{r.get('tracking_number')} (answer expected {r.get('expected_response')})."
        )
    if name == "add_customer_note":
        return f"Internal note {r.get('note_id')} added to customer {r.get('customer_id')}."
    if name == "remember_customer_fact":
        return f"Remembered for next time: {r.get('key')} = {r.get('value')}."
    return None


def finish(c: Conversation, headline: str) -> Answer:
    return Answer(f"{headline}\n\n{summary_of(c)}")


# --- the scenarios -------------------------------------------------------------------


def short_reason(c: Conversation) -> str:
    body = re.sub(r"\s+", " ", c.body).strip()
    return ("Customer request: " + body)[:160]


def sentences(text: str, limit: int = 320) -> str:
    """The leading whole sentences of ``text``, up to about ``limit`` characters."""
    out = ""
    for sentence in re.split(r"(?<=[.!?])\s+", text.strip()):
        if out and len(out) + len(sentence) > limit:
            break
        out = f"{out} {sentence}".strip()
    return out


#: A carrier's shipment status in words, for letters and summaries.
STATUS_WORDS = {
    "label_created": "waiting for the carrier to pick it up",
    "in_transit": "on its way",
    "out_for_delivery": "out for delivery today",
    "delivered": "marked as delivered",
    "exception": "held up by the carrier because of a delivery problem",
    "returned": "on its way back to us",
}


def shipment_status(status: Any) -> str:
    """``"exception"`` -> "held up by the carrier because of a delivery problem"."""
    text = str(status or "")
    return STATUS_WORDS.get(text, text.replace("_", " ") or "on its way")


def note_then_reply(
    c: Conversation, customer_id: str, note: str, message: str, thought: str
) -> Act | None:
    """One step with an internal note and the reply to the customer, each only once;
    None when both were already tried."""
    calls: list[tuple[str, dict[str, Any], str]] = []
    if not c.tried("add_customer_note"):
        calls.append(
            ("add_customer_note", {"customer_id": customer_id, "note": note}, "note the decision")
        )
    if not c.tried("send_customer_reply"):
        calls.append(
            (
                "send_customer_reply",
                {"customer_id": customer_id, "message": message},
                f"Send the customer this reply:\n{message}",
            )
        )
    return Act(calls, thought) if calls else None
