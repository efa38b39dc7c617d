"""The ``demo`` model: an offline, deterministic stand-in that plays the ticket scenarios.

It speaks the same message format as a real model (native tool calls, tool results as
JSON in ``ToolMessage``s) and decides every turn from the conversation alone: the ticket
text in the first user message (ids may also come from the system prompt), and the tool
results so far. The scenario is chosen by the ticket's *content* (keywords, see
``SCENARIOS``), never by its id. Errors and rejections are read and answered, never
retried. Nothing here is random, and nothing imports Django or the tools: it only knows
the bundled tools' names, arguments and result shapes.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from .gateway import ModelResponse, ToolSpec
from .messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)

__all__ = ["SCENARIOS", "DemoModel", "scenario_for"]

SIGNATURE = "Best regards,\nThe Support Team"
REJECTED_PREFIX = "A human reviewer rejected this call."

#: (scenario, phrases any of which selects it); the first match wins, so the order matters.
SCENARIOS: list[tuple[str, tuple[str, ...]]] = [
    ("duplicate_charge", (
        "charged twice", "double charged", "double-charged", "duplicate charge",
        "two charges", "billed twice", "charged two times",
    )),
    ("policy_refund", ()),  # refund wording + long use or a change of mind, see _is_policy
    ("damaged", (
        "damaged", "broken", "cracked", "smashed", "shattered", "dented", "in pieces",
        "leaks", "defective",
    )),
    ("cancel", ("cancel",)),
    ("address", (
        "new address", "wrong address", "change the address", "change my address",
        "shipping address", "i moved", "i've moved", "have moved", "just moved",
        "ship it to", "send it to",
    )),
    ("angry", (
        "unacceptable", "furious", "ridiculous", "worst", "third time", "fed up",
        "disgusted", "outraged", "appalling", "fourth time",
    )),
    ("not_received", (
        "never arrived", "not received", "never received", "didn't receive",
        "did not receive", "never got", "says delivered", "shows as delivered",
        "marked delivered", "marked as delivered", "stolen",
        "nothing at my door", "missing package",
    )),
    ("stock", (
        "in stock", "out of stock", "back in stock", "restock", "sold out",
        "available again", "backorder",
    )),
    ("where_is", (
        "where is my order", "where's my order", "where is my package", "tracking",
        "when will", "is late", "still waiting", "hasn't arrived", "not arrived yet",
    )),
    ("general", ()),
]  # fmt: skip

_REFUND_WORDS = ("refund", "money back", "my money")
_POLICY_WORDS = (
    "months", "used it", "worn", "changed my mind", "don't like", "do not like",
    "no longer want", "weeks ago", "a year", "outside the return",
)  # fmt: skip


def _is_policy(text: str) -> bool:
    return any(w in text for w in _REFUND_WORDS) and any(w in text for w in _POLICY_WORDS)


def scenario_for(ticket_text: str) -> str:
    """The scenario the demo model plays for a ticket, from its words alone."""
    text = ticket_text.lower().replace("\u2019", "'")
    for name, phrases in SCENARIOS:
        if name == "policy_refund":
            if _is_policy(text):
                return name
        elif any(p in text for p in phrases):
            return name
    return "general"


# --- reading the conversation --------------------------------------------------------

_ORDER_ID = re.compile(r"\b(A\d{4,})\b", re.IGNORECASE)
_CUSTOMER_ID = re.compile(r"\b(C\d{3,})\b")
_SKU = re.compile(r"\b([A-Z]{3}-\d{4})\b")
_TRACKING = re.compile(r"\b(1Z[0-9A-Z]{16})\b")
_NAMED = re.compile(r"\b([A-Z][\w'\-]+(?: [A-Z][\w'\-]+){0,2}) \((C\d{3,})\)")
_ADDRESS = re.compile(
    r"(?:new address|ship (?:it |the order |my order )?to|send it to|deliver (?:it )?to)"
    r"\s*(?:is|will be)?\s*[:\-]?\s*(.+)",
    re.IGNORECASE,
)
_TODAY = re.compile(r"\b(?:it is|today is|now:?)\s+(20\d\d-\d\d-\d\d)\b", re.IGNORECASE)


@dataclass
class _Step:
    call: ToolCall
    done: bool = False
    ok: bool = False
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    rejected: bool = False


@dataclass
class _Act:
    calls: list[tuple[str, dict[str, Any], str]]  # (tool, arguments, what it is for)
    thought: str


@dataclass
class _Answer:
    text: str


_Plan = _Act | _Answer


class _Conversation:
    """What the model knows: the ticket, ids, and every tool call with its outcome."""

    def __init__(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> None:
        self.offered = {t.name for t in tools}
        self.system = "\n".join(m.content for m in messages if isinstance(m, SystemMessage))
        users = [m for m in messages if isinstance(m, UserMessage)]
        self.task = users[0].content if users else ""
        self.text = self.task.lower().replace("\u2019", "'")
        self.steps: list[_Step] = []
        by_id: dict[str, _Step] = {}
        self.answered = False
        for m in messages:
            if isinstance(m, AssistantMessage):
                if m.content and not m.tool_calls:
                    self.answered = True
                for call in m.tool_calls:
                    step = _Step(call)
                    self.steps.append(step)
                    by_id[call.id] = step
            elif isinstance(m, ToolMessage) and m.call_id in by_id:
                _read_result(by_id[m.call_id], m)
        last = messages[-1] if messages else None
        self.nudged = isinstance(last, UserMessage) and len(users) > 1
        self.unavailable: set[str] = set()
        self.recommended: list[str] = []
        self.digest = hashlib.sha1(self.task.encode(), usedforsecurity=False).hexdigest()[:8]

    # tool history
    def last(self, name: str) -> _Step | None:
        for step in reversed(self.steps):
            if step.call.name == name:
                return step
        return None

    def tried(self, name: str) -> bool:
        return name in self.unavailable or self.last(name) is not None

    def ok(self, name: str) -> dict[str, Any] | None:
        step = self.last(name)
        return step.result if step is not None and step.ok else None

    def failed(self, name: str) -> str | None:
        step = self.last(name)
        if step is None or step.ok or step.rejected or not step.done:
            return None
        return step.error

    def rejected(self, name: str) -> str | None:
        step = self.last(name)
        return step.error if step is not None and step.rejected else None

    # ids and names
    def _find(self, pattern: re.Pattern[str]) -> str | None:
        for source in (self.task, self.system):
            m = pattern.search(source)
            if m:
                return m.group(1).upper()
        return None

    @property
    def order_id(self) -> str | None:
        found = self._find(_ORDER_ID)
        if found:
            return found
        customer = self.ok("get_customer")
        recent = (customer or {}).get("recent_orders") or []
        return str(recent[0]["order_id"]) if recent else None

    @property
    def customer_id(self) -> str | None:
        for name in ("get_order", "get_customer"):
            result = self.ok(name)
            if result and result.get("customer_id"):
                return str(result["customer_id"])
        return self._find(_CUSTOMER_ID)

    @property
    def first_name(self) -> str:
        for name, key in (("get_customer", "name"), ("get_order", "customer_name")):
            result = self.ok(name)
            if result and result.get(key):
                return str(result[key]).split()[0]
        m = _NAMED.search(self.task) or _NAMED.search(self.system)
        return m.group(1).split()[0] if m else "there"

    @property
    def sku(self) -> str | None:
        return self._find(_SKU)

    @property
    def new_address(self) -> str | None:
        for m in _ADDRESS.finditer(self.task):
            address = m.group(1).strip().splitlines()[0].strip().rstrip(".!")
            # A usable address has a number and at least "street, city".
            if any(ch.isdigit() for ch in address) and "," in address and len(address) >= 10:
                return address
        return None

    @property
    def today(self) -> str | None:
        m = _TODAY.search(self.system)
        return m.group(1) if m else None

    @property
    def subject(self) -> str:
        for line in self.task.splitlines():
            line = line.strip()
            if line.lower().startswith("subject:"):
                return line.split(":", 1)[1].strip()
            if line:
                return re.sub(r"^handle ticket #\d+:\s*", "", line, flags=re.IGNORECASE)
        return ""

    @property
    def body(self) -> str:
        lines = [ln for ln in self.task.splitlines() if ln.strip()]
        return " ".join(lines[1:]) if len(lines) > 1 else self.task


def _read_result(step: _Step, message: ToolMessage) -> None:
    step.done = True
    if message.is_error:
        text = message.content
        step.rejected = text.startswith(REJECTED_PREFIX)
        if step.rejected:
            text = text.split("Reason:", 1)[-1].strip().rstrip(".") or "no reason given"
        elif text.startswith("Error:"):
            text = text[len("Error:") :].strip()
        step.error = text
        return
    step.ok = True
    try:
        parsed = json.loads(message.content)
    except ValueError:
        parsed = {"text": message.content}
    step.result = parsed if isinstance(parsed, dict) else {"result": parsed}


# --- small helpers for the plans -----------------------------------------------------


def _dec(value: Any) -> Decimal:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return Decimal("0")


def _day(iso: Any) -> str:
    return str(iso)[:10] if iso else "an unknown date"


def _days_between(first: Any, second: Any) -> int:
    """Days from ``first`` to ``second`` (ISO dates); 0 when either is unknown."""
    try:
        return (date.fromisoformat(str(second)[:10]) - date.fromisoformat(str(first)[:10])).days
    except ValueError:
        return 0


def _ago(today: str | None, day: str) -> str:
    """' (80 days ago)' when both dates are known (the system prompt says what day it is)."""
    try:
        days = (date.fromisoformat(today or "") - date.fromisoformat(day)).days
    except ValueError:
        return ""
    return f" ({days} days ago)" if days > 0 else ""


def _letter(c: _Conversation, *paragraphs: str) -> str:
    body = "\n\n".join(p for p in paragraphs if p)
    return f"Hi {c.first_name},\n\n{body}\n\n{SIGNATURE}"


def _need_order(
    c: _Conversation, thought: str, *extra: tuple[str, dict[str, Any], str]
) -> _Plan | dict[str, Any] | None:
    """The order of the ticket: its result, a plan to fetch it, or None when unknowable."""
    result = c.ok("get_order")
    if result is not None:
        return result
    error = c.failed("get_order")
    if error is not None:
        return _Answer(
            f"I could not look up the order: {error}\n\nNext step: ask the customer to confirm "
            "the order number (it looks like A1001); nothing was changed."
        )
    order_id = c.order_id
    if order_id and not c.tried("get_order"):
        return _Act([("get_order", {"order_id": order_id}, "look up the order"), *extra], thought)
    if c.customer_id and not c.tried("get_customer"):
        return _Act(
            [("get_customer", {"customer_id": c.customer_id}, "find the customer's orders")],
            "The ticket doesn't name an order, so I'll look at the customer's recent orders.",
        )
    return None


def _reply(c: _Conversation, message: str, thought: str) -> _Act | None:
    """Send ``message`` to the customer once; None when sent, tried, or impossible."""
    if c.tried("send_customer_reply"):
        return None
    if not c.customer_id:
        c.recommended.append(f"Send the customer this reply:\n{message}")
        return None
    return _Act(
        [
            (
                "send_customer_reply",
                {"customer_id": c.customer_id, "message": message},
                f"Send the customer this reply:\n{message}",
            )
        ],
        thought,
    )


def _once(c: _Conversation, name: str, args: dict[str, Any], why: str, thought: str) -> _Act | None:
    return None if c.tried(name) else _Act([(name, args, why)], thought)


def _summary(c: _Conversation) -> str:
    """What the shop confirmed, what was refused, and what is left to a person."""
    done: list[str] = []
    not_done: list[str] = []
    for step in c.steps:
        name, args, r = step.call.name, step.call.arguments, step.result
        if step.ok:
            line = _done_line(name, r)
            if line:
                done.append(line)
        elif step.rejected:
            not_done.append(f"{_label(name, args)}: rejected by the approver ({step.error}).")
        elif step.done and name in _WRITES:
            not_done.append(f"{_label(name, args)}: the shop refused: {step.error}")
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


_WRITES = {
    "issue_refund",
    "cancel_order",
    "update_shipping_address",
    "send_customer_reply",
    "add_customer_note",
    "escalate_to_carrier",
    "remember_customer_fact",
}


def _label(name: str, args: dict[str, Any]) -> str:
    if name == "issue_refund":
        return f"Refund of {_dec(args.get('amount')):.2f} on order {args.get('order_id')}"
    if name == "cancel_order":
        return f"Cancellation of order {args.get('order_id')}"
    if name == "update_shipping_address":
        return f"Address change on order {args.get('order_id')}"
    if name == "send_customer_reply":
        return "Reply to the customer"
    if name == "escalate_to_carrier":
        return f"Carrier trace for {args.get('tracking_number')}"
    return name.replace("_", " ").capitalize()


def _done_line(name: str, r: dict[str, Any]) -> str | None:
    if name == "issue_refund":
        return (
            f"Refund {r.get('refund_id')}: {r.get('amount')} {r.get('currency', '')} on order "
            f"{r.get('order_id')} (to the original payment method)."
        )
    if name == "cancel_order":
        money = (
            f"{r.get('refunded')} {r.get('currency', '')} refunded to the customer"
            if _dec(r.get("refunded")) > 0
            else "no payment had been captured"
        )
        return f"Order {r.get('order_id')} cancelled; {money}."
    if name == "update_shipping_address":
        return f"Shipping address of order {r.get('order_id')} is now: {r.get('new_address')}."
    if name == "send_customer_reply":
        return f"Reply {r.get('reply_id')} emailed to {r.get('to')}."
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


def _finish(c: _Conversation, headline: str) -> _Answer:
    return _Answer(f"{headline}\n\n{_summary(c)}")


# --- the scenarios -------------------------------------------------------------------


def _plan_delivery(c: _Conversation, claimed_missing: bool) -> _Plan:
    order = _need_order(
        c,
        "The customer is asking about a delivery. I'll start with the order to find the "
        "shipment and its tracking number.",
    )
    if order is None:
        return _Answer(
            "I could not tell which order the customer means: the ticket names no order and "
            "no customer I can look up. Ask them for the order number (it looks like A1001)."
        )
    if not isinstance(order, dict):
        return order
    oid = order["order_id"]
    shipments = order.get("shipments") or []
    if not shipments:
        if order.get("status") == "cancelled":
            plan = _reply(
                c,
                _letter(c, f"Your order {oid} was cancelled on {_day(order.get('cancelled_at'))}"
                        ", so it will not be delivered. If that is a surprise, just reply and "
                        "we'll sort it out together."),
                "The order was cancelled, so nothing is on its way; I'll tell the customer.",
            )  # fmt: skip
            return plan or _finish(c, f"Order {oid} is cancelled; nothing was shipped.")
        plan = _reply(
            c,
            _letter(c, f"Your order {oid} hasn't left our warehouse yet. As soon as it ships "
                    "you'll get an email with the tracking number."),
            f"Order {oid} has not shipped yet, so there is no tracking. I'll let the customer "
            "know.",
        )  # fmt: skip
        return plan or _finish(c, f"Order {oid} ({order.get('status')}) has not shipped yet.")
    tracking = shipments[-1]["tracking_number"]
    track = c.ok("track_shipment")
    if track is None and not c.tried("track_shipment"):
        return _Act(
            [("track_shipment", {"tracking_number": tracking}, "track the parcel")],
            f"Order {oid} shipped with {shipments[-1]['carrier']} under {tracking}. Let me see "
            "the carrier's scans.",
        )
    if track is None:
        return _finish(
            c, f"I could not get tracking for {tracking}: {c.failed('track_shipment') or 'n/a'}"
        )
    status = track.get("status")
    events = track.get("events") or []
    last_event = events[-1] if events else {}
    open_trace = next((e for e in track.get("escalations", []) if e["status"] == "open"), None)
    if status == "delivered":
        return _delivered_missing(c, order, track, last_event, open_trace)
    if status == "exception":
        return _stuck(c, order, track, last_event, open_trace)
    eta = track.get("estimated_delivery")
    where = f"{last_event.get('description', 'in transit')} in {last_event.get('location', '?')}"
    late = _days_between(eta, c.today)
    if late >= 2:
        return _late(c, order, track, last_event, open_trace, late)
    plan = _reply(
        c,
        _letter(
            c,
            f"Your order {oid} is on its way with {track.get('carrier')} (tracking "
            f"{tracking}). The latest scan: {where} on {_day(last_event.get('at'))}. The "
            f"carrier expects to deliver it by {_day(eta)}.",
            "If it hasn't arrived two days after that date, reply to this email and we'll "
            "open a trace with the carrier right away.",
        ),
        f"The parcel is moving normally ({status}, expected {_day(eta)}); no action is "
        "needed besides telling the customer where it is.",
    )
    if plan:
        return plan
    headline = (
        f"Order {oid} is {status.replace('_', ' ') if status else 'in transit'} with "
        f"{track.get('carrier')} ({tracking}), expected by {_day(eta)}."
    )
    if claimed_missing:
        headline += " It has not been marked delivered yet, so it is not missing."
    return _finish(c, headline)


def _late(
    c: _Conversation,
    order: dict[str, Any],
    track: dict[str, Any],
    last_event: dict[str, Any],
    open_trace: dict[str, Any] | None,
    late: int,
) -> _Plan:
    """In transit but past its delivery date: trace it, then tell the customer."""
    oid, tracking, eta = order["order_id"], track["tracking_number"], track["estimated_delivery"]
    if open_trace is None:
        plan = _once(
            c,
            "escalate_to_carrier",
            {
                "tracking_number": tracking,
                "reason": f"Expected by {eta}, now {late} days late. Last scan "
                f"{_day(last_event.get('at'))}: {last_event.get('description', '?')} in "
                f"{last_event.get('location', '?')}. Please locate and deliver.",
            },
            "trace a late parcel",
            f"The carrier expected to deliver {oid} by {eta}; it is {late} days late and the "
            f"last scan was on {_day(last_event.get('at'))}. I'll open a trace.",
        )
        if plan:
            return plan
    trace_id = ((c.ok("escalate_to_carrier") or open_trace) or {}).get("escalation_id")
    plan = _reply(
        c,
        _letter(
            c,
            f"I'm sorry, your order {oid} is running late. {track.get('carrier')} expected to "
            f"deliver it by {eta}; its last scan was on {_day(last_event.get('at'))} in "
            f"{last_event.get('location', 'transit')}.",
            (
                f"We've asked the carrier to locate it (reference {trace_id}); they usually "
                "answer within 2 business days. "
                if trace_id
                else ""
            )
            + "If it can't be found, we'll send a replacement or refund you, as you prefer.",
        ),
        "Trace opened. I'll tell the customer honestly that it's late and what we're doing.",
    )
    return plan or _finish(c, f"Order {oid} ({tracking}) is {late} days late; traced.")


def _delivered_missing(
    c: _Conversation,
    order: dict[str, Any],
    track: dict[str, Any],
    last_event: dict[str, Any],
    open_trace: dict[str, Any] | None,
) -> _Plan:
    oid, tracking, customer = order["order_id"], track["tracking_number"], order["customer_id"]
    delivered = _day(track.get("delivered_at"))
    if not c.tried("get_customer_notes"):
        calls = [("get_customer_notes", {"customer_id": customer}, "check earlier contacts")]
        if "recall_customer_facts" in c.offered:
            calls.append(("recall_customer_facts", {"customer_id": customer}, "recall facts"))
        return _Act(
            calls,
            f"{track.get('carrier')} marked {tracking} delivered on {delivered} "
            f'("{last_event.get("description", "delivered")}"). Before I open a trace I\'ll '
            "check the customer's history for earlier missing-parcel claims.",
        )
    notes = (c.ok("get_customer_notes") or {}).get("notes") or []
    earlier = [
        n for n in notes
        if re.search(r"not received|never arrived|missing|marked delivered", n["note"], re.I)
    ]  # fmt: skip
    if open_trace is None:
        plan = _once(
            c,
            "escalate_to_carrier",
            {
                "tracking_number": tracking,
                "reason": f"Marked delivered on {delivered} "
                f"({last_event.get('description', 'delivered')}), but the customer reports "
                "the parcel never arrived. Please confirm the delivery location (GPS/photo) "
                "and trace the parcel.",
            },
            "open a carrier trace",
            "Nothing suggests a problem with the address, so I'll open a trace with "
            f"{track.get('carrier')}."
            + (
                f" Note: there is {len(earlier)} earlier missing-parcel claim on file; I'll "
                "flag it for the team rather than refund straight away."
                if earlier
                else ""
            ),
        )
        if plan:
            return plan
    trace = c.ok("escalate_to_carrier") or open_trace
    trace_id = (trace or {}).get("escalation_id")
    if trace_id and "remember_customer_fact" in c.offered:
        plan = _once(
            c,
            "remember_customer_fact",
            {
                "customer_id": customer,
                "key": "last_carrier_trace",
                "value": f"{trace_id} for {oid} ({tracking}): marked delivered {delivered}, "
                "customer says not received",
            },
            "remember the trace",
            "I'll remember this trace on the customer so the next colleague sees it.",
        )
        if plan:
            return plan
    trace_text = (
        f"We have opened an investigation with {track.get('carrier')} (reference {trace_id}); "
        "they usually answer within 2 business days."
        if trace_id
        else "We are looking into it with the carrier."
    )
    plan = _reply(
        c,
        _letter(
            c,
            f"I'm sorry your order {oid} hasn't reached you. {track.get('carrier')} recorded it "
            f'as delivered on {delivered} ("{last_event.get("description", "delivered")}").',
            "Parcels marked delivered sometimes turn up within a day or two, so please check "
            f"once more around the building. {trace_text}",
            "If the carrier can't find it, we'll send a replacement or refund the order, "
            "whichever you prefer.",
        ),
        "Trace is open. Now I'll let the customer know what happens next.",
    )
    if plan:
        return plan
    headline = f"Order {oid}: marked delivered on {delivered}, customer says it never arrived."
    if earlier:
        headline += (
            f" The customer has {len(earlier)} earlier missing-parcel claim(s) on file: a team "
            "lead should review before any reship or refund."
        )
    else:
        headline += " No earlier claims on file; reship or refund if the trace finds nothing."
    return _finish(c, headline)


def _stuck(
    c: _Conversation,
    order: dict[str, Any],
    track: dict[str, Any],
    last_event: dict[str, Any],
    open_trace: dict[str, Any] | None,
) -> _Plan:
    oid, tracking = order["order_id"], track["tracking_number"]
    if open_trace is None:
        plan = _once(
            c,
            "escalate_to_carrier",
            {
                "tracking_number": tracking,
                "reason": f"Parcel stuck since {_day(last_event.get('at'))}: "
                f"{last_event.get('description', 'delivery exception')}. Please deliver or "
                "return it urgently.",
            },
            "open a carrier trace",
            f'The parcel is held with an exception ("{last_event.get("description")}"). '
            "I'll open a trace with the carrier.",
        )
        if plan:
            return plan
    trace = c.ok("escalate_to_carrier") or open_trace or {}
    trace_id = trace.get("escalation_id")
    plan = _reply(
        c,
        _letter(
            c,
            f"I'm sorry for the wait. Your order {oid} is held at a {track.get('carrier')} "
            f"facility ({last_event.get('location', 'in transit')}) because of a problem "
            "with the shipping label.",
            (f"We've asked the carrier to fix it and deliver it (reference {trace_id}); they "
             "usually answer within 2 business days. " if trace_id else "")
            + "We'll update you as soon as it moves, and if it can't be delivered we'll send "
            "a replacement.",
        ),
        "I'll tell the customer what is holding the parcel and what we're doing about it.",
    )  # fmt: skip
    return plan or _finish(
        c,
        f"Order {oid} ({tracking}) is held with a delivery exception: "
        f"{last_event.get('description', '?')}.",
    )


def _pick_item(c: _Conversation, order: dict[str, Any]) -> dict[str, Any]:
    items = order.get("items") or []
    best, best_score = items[0], 0
    for item in items:
        words = [w for w in re.findall(r"[a-z]{4,}", item["name"].lower())]
        score = sum(1 for w in words if w in c.text or w.rstrip("s") in c.text)
        if score > best_score:
            best, best_score = item, score
    return best


def _plan_damaged(c: _Conversation) -> _Plan:
    kb = ("search_kb", {"query": "damaged broken item refund"}, "check the damage policy")
    order = _need_order(
        c,
        "The customer received a damaged item. I'll pull up the order and our damage policy.",
        kb,
    )
    if not isinstance(order, dict):
        return order or _Answer("I could not tell which order is damaged; ask for the number.")
    oid = order["order_id"]
    item = _pick_item(c, order)
    amount = min(_dec(item["unit_price"]), _dec(order.get("refundable_amount")))
    if amount <= 0:
        return _finish(
            c, f"Order {oid} has nothing left to refund ({order.get('refunded_amount')} "
            "already refunded); offer a replacement instead."
        )  # fmt: skip
    args = {
        "order_id": oid,
        "amount": float(amount),
        "reason": f"{item['name']} arrived damaged; customer reported it on the ticket.",
    }
    plan = _once(
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
        return _finish(
            c,
            f"The {item['name']} on order {oid} arrived damaged; our policy refunds it "
            f"({amount}) without a return. I can't make changes with the tools I have.",
        )
    refund = c.ok("issue_refund")
    if refund is not None:
        plan = _reply(
            c,
            _letter(
                c,
                f"I'm sorry your {item['name']} arrived damaged. We've refunded "
                f"{refund['amount']} {refund.get('currency', '')} to your original payment "
                "method; it shows within 3 to 5 business days.",
                "There's no need to send the broken item back. If you'd rather have a "
                "replacement, just reply and we'll ship one.",
            ),
            f"The refund went through ({refund.get('refund_id')}). Now the reply to the customer.",
        )
        return plan or _finish(
            c, f"Refunded the damaged {item['name']} on order {oid} and told the customer."
            if c.ok("send_customer_reply") else
            f"Refunded the damaged {item['name']} on order {oid}; the reply was not sent."
        )  # fmt: skip
    reason = c.rejected("issue_refund")
    if reason is not None:
        plan = _once(
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
        return _finish(
            c,
            f"The refund for the damaged {item['name']} on {oid} was rejected ({reason}), so "
            "no money was returned. Suggest offering a free replacement; I have not written "
            "to the customer yet.",
        )
    return _finish(
        c,
        f"The shop refused the refund on {oid}: {c.failed('issue_refund')}. Nothing was "
        "refunded; check the order's payments before trying again.",
    )


def _plan_policy_refund(c: _Conversation) -> _Plan:
    kb = ("search_kb", {"query": "return policy refund window used items"}, "check policy")
    order = _need_order(
        c,
        "The customer wants a full refund for something they have had for a while. I'll "
        "check the order and our return policy.",
        kb,
    )
    if not isinstance(order, dict):
        return order or _Answer("I could not tell which order this is about; ask for it.")
    oid = order["order_id"]
    shipments = order.get("shipments") or []
    delivered = _day(shipments[-1].get("delivered_at")) if shipments else "not delivered"
    full = _dec(order.get("refundable_amount"))
    items = ", ".join(i["name"] for i in order.get("items") or [])
    if full <= 0:
        return _finish(c, f"Order {oid} has already been refunded in full; nothing to do.")
    plan = _once(
        c,
        "issue_refund",
        {
            "order_id": oid,
            "amount": float(full),
            "reason": f"Exception request: full refund of {items}, delivered {delivered}, "
            "used by the customer; outside the 30-day return policy.",
        },
        f"refund {full} on {oid} as an exception",
        f"{oid} was delivered on {delivered}{_ago(c.today, delivered)} and the customer says "
        "they used it: that is "
        "outside our 30-day, unused-items return policy. Only an approver can grant an "
        f"exception, so I'm asking for the full {full} and letting them decide.",
    )
    if plan:
        return plan
    if "issue_refund" in c.unavailable:
        return _finish(
            c,
            f"{oid} (delivered {delivered}) is outside the return policy; a full refund of "
            f"{full} would need an approver's exception.",
        )
    refund = c.ok("issue_refund")
    if refund is not None:
        plan = _reply(
            c,
            _letter(
                c,
                f"Thanks for your patience. Your order {oid} is outside our 30-day return "
                "window, but we've made a one-time exception and refunded "
                f"{refund['amount']} {refund.get('currency', '')} to your original payment "
                "method. It shows within 3 to 5 business days.",
            ),
            "The approver granted the exception. I'll tell the customer.",
        )
        return plan or _finish(c, f"Exception granted: full refund on {oid}.")
    reason = c.rejected("issue_refund")
    if reason is not None:
        message = _letter(
            c,
            f"Thank you for telling us about the {items}. I checked your order {oid}: it was "
            f"delivered on {delivered}, and our return policy covers unused items returned "
            "within 30 days of delivery. Because this one has been used and is past that "
            "window, we're not able to refund it.",
            "I'm sorry this isn't the answer you hoped for. If something is wrong with the "
            "item itself, reply with a few details and we'll look at it again.",
        )
        calls: list[tuple[str, dict[str, Any], str]] = []
        if not c.tried("add_customer_note"):
            calls.append(
                (
                    "add_customer_note",
                    {
                        "customer_id": order["customer_id"],
                        "note": f"Asked for a full refund of {oid} outside policy; exception "
                        f"rejected by approver ({reason}). Explained the return policy.",
                    },
                    "note the decision",
                )
            )
        if not c.tried("send_customer_reply"):
            calls.append(
                (
                    "send_customer_reply",
                    {"customer_id": order["customer_id"], "message": message},
                    f"Send the customer this reply:\n{message}",
                )
            )
        if calls:
            return _Act(
                calls,
                f"The approver rejected the exception ({reason}). I won't retry the refund; "
                "instead I'll explain the policy to the customer kindly and note it.",
            )
        return _finish(
            c,
            f"No refund: a full refund of {oid} is outside the return policy and the approver "
            f"rejected the exception ({reason}). "
            + (
                "I explained the policy to the customer."
                if c.ok("send_customer_reply")
                else "The explanation below still needs to reach the customer."
            ),
        )
    return _finish(c, f"The shop refused the refund on {oid}: {c.failed('issue_refund')}.")


def _short_reason(c: _Conversation) -> str:
    body = re.sub(r"\s+", " ", c.body).strip()
    return ("Customer request: " + body)[:160]


def _plan_cancel(c: _Conversation) -> _Plan:
    order = _need_order(c, "The customer wants to cancel. I'll check whether the order shipped.")
    if not isinstance(order, dict):
        return order or _Answer("I could not tell which order to cancel; ask for the number.")
    oid, status = order["order_id"], order.get("status")
    if status == "cancelled":
        plan = _reply(
            c,
            _letter(c, f"Good news: your order {oid} is already cancelled and any payment "
                    "was returned."),
            "The order is already cancelled; I'll confirm that to the customer.",
        )  # fmt: skip
        return plan or _finish(c, f"Order {oid} was already cancelled.")
    if order.get("can_cancel_or_change_address"):
        plan = _once(
            c,
            "cancel_order",
            {"order_id": oid, "reason": _short_reason(c)},
            f"cancel {oid}",
            f"{oid} is {status} and hasn't shipped, so it can still be cancelled; the payment "
            "is refunded automatically. Cancelling needs approval.",
        )
        if plan:
            return plan
        if "cancel_order" in c.unavailable:
            return _finish(c, f"{oid} is {status} and can still be cancelled.")
        done = c.ok("cancel_order")
        if done is not None:
            refunded = _dec(done.get("refunded"))
            money = (
                f"The {done['refunded']} {done.get('currency', '')} you paid goes back to your "
                "original payment method within 3 to 5 business days."
                if refunded > 0
                else "You were not charged for it."
            )
            plan = _reply(
                c,
                _letter(c, f"Your order {oid} is cancelled. {money}"),
                "Cancelled. Now the confirmation to the customer.",
            )
            return plan or _finish(c, f"Order {oid} cancelled at the customer's request.")
        reason = c.rejected("cancel_order")
        if reason is not None:
            return _finish(
                c,
                f"The cancellation of {oid} was rejected by the approver ({reason}); the "
                "order stays as it is and I have not written to the customer.",
            )
        error = c.failed("cancel_order")
        return _finish(c, f"The shop refused to cancel {oid}: {error}")
    shipments = order.get("shipments") or []
    if shipments and not c.tried("track_shipment"):
        return _Act(
            [("track_shipment", {"tracking_number": shipments[-1]["tracking_number"]}, "ETA")],
            f"{oid} is already {status}, so it can't be cancelled any more. I'll check when "
            "it arrives so I can explain the return option.",
        )
    track = c.ok("track_shipment") or {}
    eta = track.get("estimated_delivery")
    arrival = (
        f"It was delivered on {_day(track.get('delivered_at'))}."
        if status == "delivered"
        else f"It's on its way and should arrive by {_day(eta)}."
        if eta and _days_between(eta, c.today) <= 0
        else "It's already on its way to you."
    )
    plan = _reply(
        c,
        _letter(
            c,
            f"I'm sorry, your order {oid} has already shipped, so we can no longer cancel "
            f"it. {arrival}",
            "Once you have it, you can return any unused items within 30 days for a full "
            "refund; start the return from your account and we'll email you a prepaid label.",
        ),
        "I'll explain that it's too late to cancel and how the return works.",
    )
    return plan or _finish(
        c, f"Order {oid} was already {status}, so it could not be cancelled; return explained."
    )


def _plan_address(c: _Conversation) -> _Plan:
    order = _need_order(
        c, "The customer wants the parcel to go to another address. First, has it shipped?"
    )
    if not isinstance(order, dict):
        return order or _Answer("I could not tell which order this is; ask for the number.")
    oid, status = order["order_id"], order.get("status")
    address = c.new_address
    if address is None:
        plan = _reply(
            c,
            _letter(c, f"I can change the delivery address of order {oid} for you. Please "
                    "reply with the full new address: street and number, postal code, city "
                    "and country."),
            "The ticket has no complete new address, so I'll ask for it instead of guessing.",
        )  # fmt: skip
        return plan or _finish(c, f"Waiting for the customer's new address for {oid}.")
    if order.get("can_cancel_or_change_address"):
        plan = _once(
            c,
            "update_shipping_address",
            {"order_id": oid, "address": address},
            f"change the address of {oid}",
            f"{oid} is {status} and hasn't shipped, so I can change the address to "
            f'"{address}". This needs approval.',
        )
        if plan:
            return plan
        if "update_shipping_address" in c.unavailable:
            return _finish(c, f"{oid} has not shipped; it can still go to {address}.")
        changed = c.ok("update_shipping_address")
        if changed is not None:
            plan = _reply(
                c,
                _letter(c, f"Done: order {oid} will ship to {changed['new_address']}. You'll "
                        "get the tracking number by email when it leaves our warehouse."),
                "Address changed. I'll confirm it to the customer.",
            )  # fmt: skip
            return plan or _finish(c, f"Order {oid} now ships to the new address.")
        reason = c.rejected("update_shipping_address")
        if reason is not None:
            return _finish(
                c,
                f"The address change on {oid} was rejected ({reason}); the order keeps its "
                "address. Check the new address with the customer.",
            )
        return _finish(
            c, f"The shop refused the address change: {c.failed('update_shipping_address')}"
        )
    shipments = order.get("shipments") or []
    if status == "shipped" and shipments:
        tracking = shipments[-1]["tracking_number"]
        plan = _once(
            c,
            "escalate_to_carrier",
            {
                "tracking_number": tracking,
                "reason": f"Customer asks to redirect the parcel to: {address}",
            },
            "ask the carrier to redirect",
            f"{oid} has already shipped ({tracking}), so the order's address can't be "
            "changed. Our policy is to ask the carrier for a redirect instead.",
        )
        if plan:
            return plan
        trace = c.ok("escalate_to_carrier")
        redirect = (
            f"We've asked {trace.get('carrier')} to redirect it to {address} (reference "
            f"{trace.get('escalation_id')}). Redirects usually add a day or two and "
            "aren't guaranteed; we'll let you know what the carrier says."
            if trace
            else "Please contact us again if you'd like us to ask the carrier to redirect it."
        )
        plan = _reply(
            c,
            _letter(c, f"Your order {oid} had already left our warehouse, so I couldn't "
                    f"change its address directly. {redirect}"),
            "I'll explain the redirect to the customer.",
        )  # fmt: skip
        return plan or _finish(
            c, f"{oid} had shipped; the address could not be changed, a redirect was requested."
            if trace else f"{oid} had shipped; the address could not be changed."
        )  # fmt: skip
    plan = _reply(
        c,
        _letter(c, f"Your order {oid} is {status}, so its address can no longer be changed. "
                "If anything went wrong with the delivery, reply and we'll help."),
        f"{oid} is {status}; there's nothing to redirect. I'll explain.",
    )  # fmt: skip
    return plan or _finish(c, f"{oid} is {status}; the address could not be changed.")


def _plan_stock(c: _Conversation) -> _Plan:
    sku = c.sku
    kb = ("search_kb", {"query": "out of stock restock backorder"}, "check restock policy")
    if sku is None:
        if not c.tried("search_kb"):
            return _Act([kb], "The ticket doesn't give a SKU; I'll check the restock policy.")
        return _finish(
            c,
            "The customer asks about stock but names no product code; ask which product "
            "(a link or SKU like KIT-0101). Policy: no backorders, back-in-stock emails.",
        )
    if not c.tried("check_inventory"):
        calls = [("check_inventory", {"sku": sku}, "check stock")]
        if not c.tried("search_kb"):
            calls.append(kb)
        return _Act(calls, f"I'll check the stock of {sku} and our restock policy.")
    stock = c.ok("check_inventory")
    if stock is None:
        return _finish(
            c,
            f"I could not check {sku}: {c.failed('check_inventory')}. Ask the customer for "
            "the product link.",
        )
    name, available = stock["name"], int(stock.get("available") or 0)
    wanted = 2 if re.search(r"\b(two|2|pair of)\b", c.text) else 1
    if available >= wanted:
        text = (
            f"Good news: the {name} ({sku}) is in stock right now, so you can order it on our "
            "site today. We don't hold stock for orders that aren't placed yet, so sooner is "
            "better."
        )
        headline = f"{sku} is in stock ({available} available)."
    elif available > 0:
        text = (
            f"We have only {available} of the {name} ({sku}) in stock at the moment, fewer "
            f"than the {wanted} you asked about."
        )
        headline = f"{sku}: only {available} available, the customer wants {wanted}."
    else:
        restock = stock.get("restock_date")
        when = (
            f"We expect new stock around {restock}."
            if restock
            else "We don't have a confirmed restock date yet."
        )
        text = (
            f"The {name} ({sku}) is sold out at the moment. {when} We don't take backorders, "
            "but you can sign up for a back-in-stock email on the product page and we'll "
            "tell you the moment it's available."
        )
        headline = f"{sku} is out of stock; restock {restock or 'date unknown'}."
    plan = _reply(
        c,
        _letter(c, text),
        f"{sku}: {available} available. I'll answer the customer.",
    )
    return plan or _finish(c, headline)


def _plan_duplicate(c: _Conversation) -> _Plan:
    kb = ("search_kb", {"query": "duplicate charge pending authorization"}, "billing policy")
    order = _need_order(
        c, "The customer reports a double charge. I'll compare the order's captured payments.", kb
    )
    if not isinstance(order, dict):
        return order or _Answer("I could not tell which order was charged; ask for it.")
    oid = order["order_id"]
    payments = order.get("payments") or []
    extra = _dec(order.get("captured_amount")) - _dec(order.get("total"))
    refunded = _dec(order.get("refunded_amount"))
    due = extra - refunded
    if extra > 0 and due > 0:
        second = payments[-1]["reference"] if len(payments) > 1 else "second capture"
        plan = _once(
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
            return _finish(c, f"{oid} was charged twice; the duplicate {due} should be refunded.")
        refund = c.ok("issue_refund")
        if refund is not None:
            plan = _reply(
                c,
                _letter(c, f"You're right, and I'm sorry: order {oid} was charged twice. "
                        f"We've refunded the duplicate {refund['amount']} "
                        f"{refund.get('currency', '')}; it shows on your statement within 3 "
                        "to 5 business days."),
                "Duplicate refunded. Now the apology to the customer.",
            )  # fmt: skip
            return plan or _finish(c, f"Duplicate charge on {oid} refunded.")
        reason = c.rejected("issue_refund")
        if reason is not None:
            plan = _once(
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
            return plan or _finish(
                c, f"The duplicate {due} on {oid} is real but its refund was rejected ({reason})."
            )
        return _finish(c, f"The shop refused the refund: {c.failed('issue_refund')}")
    if extra > 0:
        plan = _reply(
            c,
            _letter(c, f"The second charge on order {oid} was already refunded "
                    f"({order.get('refunded_amount')}); it can take 3 to 5 business days to "
                    "show on your statement."),
            "The duplicate was already refunded; I'll tell the customer.",
        )  # fmt: skip
        return plan or _finish(c, f"The duplicate on {oid} was already refunded.")
    message = _letter(
        c,
        f"I checked order {oid}: we captured one payment of {order.get('total')}. The second "
        "amount in your bank app is a pending card authorization, not a charge; it drops off "
        "by itself within 3 to 5 business days.",
        "If it is still there after that, reply with a screenshot and we'll take it up with "
        "the payment provider.",
    )
    calls: list[tuple[str, dict[str, Any], str]] = []
    if not c.tried("add_customer_note"):
        calls.append(
            (
                "add_customer_note",
                {
                    "customer_id": order["customer_id"],
                    "note": f"Reported a duplicate charge on {oid}; only one capture found, "
                    "explained pending authorizations.",
                },
                "note",
            )
        )
    if not c.tried("send_customer_reply"):
        calls.append(
            (
                "send_customer_reply",
                {"customer_id": order["customer_id"], "message": message},
                f"Send the customer this reply:\n{message}",
            )
        )
    if calls:
        return _Act(
            calls,
            f"{oid} has a single captured payment of {order.get('total')}, so nothing to "
            "refund: the second line is a pending authorization. I'll explain and note it.",
        )
    return _finish(c, f"No duplicate on {oid}: one capture only (pending authorization).")


def _plan_angry(c: _Conversation) -> _Plan:
    customer = c.customer_id
    if customer is None:
        order = _need_order(c, "An upset customer. I'll find the order first.")
        if isinstance(order, _Act | _Answer):
            return order
        customer = c.customer_id
    if customer and not c.tried("get_customer_notes"):
        calls = [
            ("get_customer", {"customer_id": customer}, "who they are"),
            ("get_customer_notes", {"customer_id": customer}, "earlier contacts"),
        ]
        if "recall_customer_facts" in c.offered:
            calls.append(("recall_customer_facts", {"customer_id": customer}, "memory"))
        return _Act(
            calls,
            "The customer is clearly upset and says this isn't the first contact. Before "
            "anything else I'll read their history: profile, notes and what we remembered.",
        )
    order = _need_order(c, "Now the order they're writing about.")
    if isinstance(order, _Act | _Answer):
        return order
    notes = (c.ok("get_customer_notes") or {}).get("notes") or []
    facts = {f["key"]: f["value"] for f in (c.ok("recall_customer_facts") or {}).get("facts", [])}
    profile = c.ok("get_customer") or {}
    track: dict[str, Any] = {}
    trace_id = None
    oid = order["order_id"] if order else None
    if order:
        shipments = order.get("shipments") or []
        if shipments and not c.tried("track_shipment"):
            return _Act(
                [("track_shipment", {"tracking_number": shipments[-1]["tracking_number"]}, "")],
                f"{len(notes)} earlier notes on file. Let me see where {oid} actually is.",
            )
        track = c.ok("track_shipment") or {}
        events = track.get("events") or []
        last_event = events[-1] if events else {}
        open_trace = next((e for e in track.get("escalations", []) if e["status"] == "open"), None)
        trace_id = (open_trace or {}).get("escalation_id")
        late = track.get("status") == "exception" or (
            track.get("status") in ("in_transit", "label_created")
            and any(re.search(r"promised|eta|delay", n["note"], re.I) for n in notes)
        )
        if track and late and open_trace is None:
            plan = _once(
                c,
                "escalate_to_carrier",
                {
                    "tracking_number": track["tracking_number"],
                    "reason": f"Repeat complaint ({len(notes) + 1} contacts). Last scan "
                    f"{_day(last_event.get('at'))}: {last_event.get('description', '?')}. "
                    "Please prioritise delivery.",
                },
                "priority trace",
                f"{oid} is {str(track.get('status')).replace('_', ' ')} and we've already made "
                "promises we didn't keep. One concrete action now: a priority trace with the "
                "carrier.",
            )
            if plan:
                return plan
            trace_id = (c.ok("escalate_to_carrier") or {}).get("escalation_id") or trace_id
    contacts = len(notes) + 1
    if customer and not c.tried("add_customer_note"):
        calls = [
            (
                "add_customer_note",
                {
                    "customer_id": customer,
                    "note": f"Contact #{contacts} about {oid or 'their order'}, customer upset. "
                    + (f"Priority carrier trace {trace_id} opened. " if trace_id else "")
                    + "Replied by email with a concrete next step.",
                },
                "note",
            )
        ]
        if "remember_customer_fact" in c.offered:
            calls.append(
                (
                    "remember_customer_fact",
                    {
                        "customer_id": customer,
                        "key": "escalation_history",
                        "value": f"{contacts} contacts about {oid or 'an order'}"
                        + (f"; trace {trace_id}" if trace_id else "")
                        + "; handle with priority",
                    },
                    "remember",
                )
            )
        return _Act(calls, "I'll record this contact and remember it for whoever is next.")
    contact = facts.get("preferred_contact")
    status_text = ""
    if track:
        status_text = (
            f"Your parcel ({track.get('carrier')} {track.get('tracking_number')}) is "
            f"{str(track.get('status', '')).replace('_', ' ')}."
        )
    plan = _reply(
        c,
        _letter(
            c,
            "I'm sorry. You've had to contact us "
            + (f"{contacts} times" if contacts > 1 else "again")
            + " about this, and that is not the service we want to give you.",
            status_text
            + (
                f" I've opened a priority investigation with the carrier today (reference "
                f"{trace_id}), and I'll personally follow up as soon as they answer, within "
                "2 business days."
                if trace_id
                else " I'm following this up myself."
            ),
            "We'll keep to email as you asked." if contact and "email" in contact else "",
        ),
        "Now a reply that acknowledges the history and gives one concrete next step.",
    )
    if plan:
        return plan
    tier = profile.get("tier")
    return _finish(
        c,
        f"Repeat contact ({contacts}) from an upset {tier or ''} customer about "
        f"{oid or 'an order'}." + (f" Remembered preference: {contact}." if contact else ""),
    )


def _sentences(text: str, limit: int = 320) -> str:
    """The leading whole sentences of ``text``, up to about ``limit`` characters."""
    out = ""
    for sentence in re.split(r"(?<=[.!?])\s+", text.strip()):
        if out and len(out) + len(sentence) > limit:
            break
        out = f"{out} {sentence}".strip()
    return out


def _plan_general(c: _Conversation) -> _Plan:
    if not c.tried("search_kb"):
        calls: list[tuple[str, dict[str, Any], str]] = []
        order_id = c._find(_ORDER_ID)
        if order_id and not c.tried("get_order"):
            calls.append(("get_order", {"order_id": order_id}, "look up the order"))
        elif c.customer_id and not c.tried("get_customer"):
            calls.append(("get_customer", {"customer_id": c.customer_id}, "who they are"))
        query = f"{c.subject} {c.body}".strip()[:200]
        calls.append(("search_kb", {"query": query}, "find the relevant article"))
        return _Act(calls, "A general question. I'll look for the answer in the knowledge base.")
    results = (c.ok("search_kb") or {}).get("results") or []
    if not results:
        return _finish(
            c,
            "The knowledge base has nothing on this question; it needs a person. No changes "
            "were made.",
        )
    top = results[0]
    draft = _letter(c, f"Thanks for reaching out. {_sentences(top.get('body') or top['excerpt'])}")
    return _finish(
        c,
        f'General question; the best match is the article "{top["title"]}" ({top["slug"]}). '
        "Nothing needed changing. A suggested reply for you to review (not sent):\n\n" + draft,
    )


_PLANS: dict[str, Callable[[_Conversation], _Plan]] = {
    "not_received": lambda c: _plan_delivery(c, claimed_missing=True),
    "where_is": lambda c: _plan_delivery(c, claimed_missing=False),
    "damaged": _plan_damaged,
    "policy_refund": _plan_policy_refund,
    "cancel": _plan_cancel,
    "address": _plan_address,
    "stock": _plan_stock,
    "duplicate_charge": _plan_duplicate,
    "angry": _plan_angry,
    "general": _plan_general,
}


# --- the model -----------------------------------------------------------------------


class DemoModel:
    """Plays the bundled ticket scenarios offline; deterministic, no network, no keys."""

    name = "demo"
    scripted = True

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        timeout: float | None = None,
    ) -> ModelResponse:
        started = time.perf_counter()
        message = self._next(_Conversation(messages, tools))
        return ModelResponse(
            message=message,
            usage=_usage(messages, tools, message),
            model=self.name,
            latency_ms=(time.perf_counter() - started) * 1000,
            finish_reason="tool_calls" if message.tool_calls else "stop",
        )

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        response = self.complete(messages, tools, timeout=timeout)
        if on_delta is not None:
            for chunk in _chunks(response.message.content):
                on_delta(chunk)
        return response

    def _next(self, c: _Conversation) -> AssistantMessage:
        if c.nudged and c.answered:
            # The loop (a validator, or an empty-reply reminder) objected to the answer:
            # answer again with only what the shop confirmed.
            return AssistantMessage(
                content="I re-checked what the tools confirmed and corrected my answer.\n\n"
                + _summary(c)
            )
        plan_for = _PLANS[scenario_for(c.task)]
        for _ in range(len(_WRITES) + 10):
            plan = plan_for(c)
            if isinstance(plan, _Answer):
                return AssistantMessage(content=plan.text)
            offered = [(n, a, w) for n, a, w in plan.calls if n in c.offered]
            for name, _args, why in plan.calls:
                if name not in c.offered:
                    c.unavailable.add(name)
                    if name in _WRITES:
                        c.recommended.append(why[:1].upper() + why[1:])
            if offered:
                return AssistantMessage(content=plan.thought, tool_calls=self._calls(c, offered))
        return AssistantMessage(content=_finish(c, "I could not finish this ticket.").text)

    @staticmethod
    def _calls(c: _Conversation, calls: list[tuple[str, dict[str, Any], str]]) -> list[ToolCall]:
        base = len(c.steps)
        return [
            ToolCall(id=f"call_{c.digest}_{base + i + 1:02d}", name=name, arguments=args)
            for i, (name, args, _why) in enumerate(calls)
        ]


def _chunks(text: str, words: int = 3) -> list[str]:
    parts = re.findall(r"\S+\s*", text)
    return ["".join(parts[i : i + words]) for i in range(0, len(parts), words)]


def _usage(
    messages: Sequence[Message], tools: Sequence[ToolSpec], reply: AssistantMessage
) -> Usage:
    """Plausible token counts: about four characters per token, like real tokenizers."""
    chars = 0
    for m in messages:
        chars += len(m.content) + 8
        if isinstance(m, AssistantMessage):
            chars += sum(len(json.dumps(t.arguments)) + len(t.name) for t in m.tool_calls)
    chars += sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)
    out = len(reply.content) + sum(
        len(json.dumps(t.arguments)) + len(t.name) + 12 for t in reply.tool_calls
    )
    return Usage(input_tokens=chars // 4 + 3, output_tokens=max(1, out // 4))
