"""Business validator (completion layer 1): claims in a final answer must be true in the shop.

When the model's final answer says it refunded, cancelled, changed an address or wrote to
the customer, the shop must show it. Evidence is a shop row that this run created (found
through the ids in the run's successful tool results), or, when ``since`` is given, a
matching row in the ticket's scope created since then. Without evidence the validator
returns a message; the loop hands it to the model, which continues.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentweb.tickets.models import Message, Ticket

from .models import AddressChange, Order, Refund

# A claim states an action as done. A negation or condition in or just before the
# matched words ("no refund has been issued", "once approved") makes it no claim.
_ANY = r"(?:[^.!?\n]|(?<=\d)\.(?=\d))"  # within a sentence; "38.00" is one word


def _gap(n: int) -> str:
    return _ANY + "{0," + str(n) + "}"


_CLAIMS: dict[str, re.Pattern[str]] = {
    "refund": re.compile(
        r"\b(?:i|we)(?:'ve| have)?\s+(?:now\s+|just\s+|already\s+)?(?:issued|processed|"
        r"refunded|sent|made|initiated)\b" + _gap(60) + r"\brefund"
        r"|\brefund\b" + _gap(60) + r"\b(?:has been|have been|was|is now)\s+(?:issued|"
        r"processed|made|completed|sent|initiated)\b"
        r"|\b(?:i|we)(?:'ve| have)?\s+refunded\b"
        r"|\b\d+(?:\.\d\d)?(?: [A-Z]{3})? (?:(?:has|have) been |was )?refunded\b"
        r"|\b(?:has|have) been refunded\b",
        re.IGNORECASE,
    ),
    "cancellation": re.compile(
        r"\b(?:i|we)(?:'ve| have)?\s+(?:now\s+|just\s+)?cancell?ed\b"
        r"|\b(?:has|have) been cancell?ed\b|\bwas cancell?ed\b|\bis (?:now )?cancell?ed\b",
        re.IGNORECASE,
    ),
    "address change": re.compile(
        r"\baddress\b" + _gap(80) + r"\b(?:has been|was|is now)\s+(?:updated|changed|"
        r"corrected)\b"
        r"|\b(?:i|we)(?:'ve| have)?\s+(?:now\s+|just\s+)?(?:updated|changed|corrected)\b"
        + _gap(50)
        + r"\baddress\b",
        re.IGNORECASE,
    ),
    "reply to the customer": re.compile(
        r"\b(?:i|we)(?:'ve| have)?\s+(?:now\s+|just\s+|also\s+)?(?:sent|emailed|replied|"
        r"written)\b" + _gap(50) + r"\b(?:reply|customer|email|message|them|her|him)\b"
        r"|\b(?:reply|message|email)\b" + _gap(40) + r"\b(?:has been|was)\s+sent\b"
        r"|\bsent (?:the|a|an|my) (?:reply|message|email)\b",
        re.IGNORECASE,
    ),
}
_NEGATION = re.compile(
    r"\b(?:not|no|never|cannot|unable|rejected|declined|refused|if|once|before|pending|"
    r"draft|propose[sd]?|awaiting)\b|n't\b",
    re.IGNORECASE,
)
#: How far before a claim a negation still counts ("no refund has been issued").
_NEGATION_REACH = 30
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_ORDER_ID = re.compile(r"\bA\d{4,}\b", re.IGNORECASE)

#: The write tool whose success backs each kind of claim.
_TOOLS = {
    "refund": ("issue_refund", "cancel_order"),
    "cancellation": ("cancel_order",),
    "address change": ("update_shipping_address",),
    "reply to the customer": ("send_customer_reply",),
}


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A finished tool call of the run, as the validator sees it."""

    tool: str
    arguments: Mapping[str, Any]
    ok: bool
    result: Any


def claims_in(answer: str) -> list[str]:
    """The kinds of action the answer states as done, in a stable order."""
    found: set[str] = set()
    for sentence in _SENTENCE.split(answer):
        for kind, pattern in _CLAIMS.items():
            for match in pattern.finditer(sentence):
                window = sentence[max(0, match.start() - _NEGATION_REACH) : match.end()]
                if not _NEGATION.search(window):
                    found.add(kind)
    return [k for k in _CLAIMS if k in found]


def check_claims(
    answer: str,
    ticket_id: int | str | None,
    tool_results: Iterable[ToolResult],
    *,
    since: datetime | None = None,
) -> str | None:
    """None when every action the answer claims shows in the shop, else what is missing."""
    claims = claims_in(answer)
    if not claims:
        return None
    results = [r for r in tool_results if r.ok and isinstance(r.result, Mapping)]
    ticket = _ticket(ticket_id)
    missing = [kind for kind in claims if not _evidence(kind, results, ticket, answer, since)]
    if not missing:
        return None
    what = ", ".join(missing)
    return (
        f"Your answer says the following happened, but the shop does not show it: {what}. "
        "Only state what a tool confirmed. If the action is still needed, do it with the "
        "right tool (it may need approval); otherwise correct your answer and say plainly "
        "what was and was not done."
    )


def validator_for_ticket(
    ticket_id: int | str | None, *, since: datetime | None = None
) -> Callable[[str, Any], str | None]:
    """The loop's ``validator(answer, state)`` for a run on ``ticket_id``."""

    def validate(answer: str, state: Any) -> str | None:
        return check_claims(answer, ticket_id, tool_results_of(state), since=since)

    return validate


def claims_validator(answer: str, state: Any) -> str | None:
    """The claims validator a profile names (``validator``): the ticket and the run's
    start come from the run's context (``state.context``: ``subject``, ``started_at``)."""
    context = getattr(state, "context", None) or {}
    since = None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        since = datetime.fromisoformat(str(context["started_at"]))
    subject = context.get("subject", context.get("ticket_id"))
    return check_claims(answer, subject, tool_results_of(state), since=since)


def tool_results_of(state: Any) -> list[ToolResult]:
    """The finished tool calls in a ``LoopState``'s messages, with their arguments."""
    arguments: dict[str, tuple[str, Mapping[str, Any]]] = {}
    out: list[ToolResult] = []
    for message in getattr(state, "messages", ()):
        role = getattr(message, "role", None)
        if role == "assistant":
            for call in message.tool_calls:
                arguments[call.id] = (call.name, call.arguments)
        elif role == "tool":
            name, args = arguments.get(message.call_id, (message.name, {}))
            try:
                result = json.loads(message.content)
            except ValueError:
                result = message.content
            out.append(ToolResult(name, args, not message.is_error, result))
    return out


# --- evidence ------------------------------------------------------------------------


def _ticket(ticket_id: int | str | None) -> Ticket | None:
    text = str(ticket_id or "").strip()
    if not (text.isascii() and text.isdigit()):  # int("²") raises
        return None
    return Ticket.objects.filter(pk=int(text)).first()


def _pk(value: Any, prefix: str) -> int | None:
    text = str(value or "")
    digits = text[len(prefix) :]
    if text.startswith(prefix) and digits.isascii() and digits.isdigit():
        return int(digits)
    return None


def _evidence(
    kind: str,
    results: Sequence[ToolResult],
    ticket: Ticket | None,
    answer: str,
    since: datetime | None,
) -> bool:
    ours = [r.result for r in results if r.tool in _TOOLS[kind]]
    if kind == "refund":
        refund_pks = [_pk(r.get("refund_id"), "R") for r in ours]
        if Refund.objects.filter(pk__in=[p for p in refund_pks if p]).exists():
            return True
        cancelled = [r["order_id"] for r in ours if r.get("status") == "cancelled"]
        if Refund.objects.filter(
            order__number__in=cancelled, reason__startswith="Order cancelled"
        ).exists():
            return True
    elif kind == "cancellation":
        # A cancellation is a current fact: an order in scope that is cancelled counts.
        numbers = {r.get("order_id") for r in ours if r.get("status") == "cancelled"}
        numbers |= _scope(ticket, answer)
        if Order.objects.filter(number__in=numbers, status=Order.Status.CANCELLED).exists():
            return True
    elif kind == "address change":
        for r in ours:
            if Order.objects.filter(
                number=r.get("order_id"), shipping_address=r.get("new_address")
            ).exists():
                return True
    elif kind == "reply to the customer":
        reply_pks = [_pk(r.get("reply_id"), "M") for r in ours]
        if Message.objects.filter(
            pk__in=[p for p in reply_pks if p], direction=Message.Direction.OUT
        ).exists():
            return True
    return since is not None and _recent_in_scope(kind, ticket, answer, since)


def _scope(ticket: Ticket | None, answer: str) -> set[str]:
    """Order numbers the answer is about: those it names and the ticket's order."""
    numbers = {m.upper() for m in _ORDER_ID.findall(answer)}
    order_id = (ticket.fields or {}).get("order_id") if ticket is not None else None
    if isinstance(order_id, str) and order_id.strip():
        numbers.add(order_id.strip().upper())
    return numbers


def _recent_in_scope(kind: str, ticket: Ticket | None, answer: str, since: datetime) -> bool:
    numbers = _scope(ticket, answer)
    if kind == "refund":
        return Refund.objects.filter(order__number__in=numbers, created_at__gte=since).exists()
    if kind == "cancellation":
        return Order.objects.filter(number__in=numbers, cancelled_at__gte=since).exists()
    if kind == "address change":
        return AddressChange.objects.filter(
            order__number__in=numbers, created_at__gte=since
        ).exists()
    if ticket is None:
        return False
    return Message.objects.filter(
        ticket=ticket, direction=Message.Direction.OUT, at__gte=since
    ).exists()
