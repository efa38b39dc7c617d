"""The ``demo`` model: an offline, deterministic stand-in that plays the ticket scenarios.

It speaks the same message format as a real model (native tool calls, tool results as
JSON in ``ToolMessage``s) and decides every turn from the conversation alone: the ticket
text in the first user message (ids may also come from the system prompt), and the tool
results so far. The scenario is chosen by the ticket's *content* (keywords, see
``SCENARIOS``), never by its id; each scenario is one module of this package. Errors and
rejections are read and answered, never retried. Nothing here is random, and nothing
imports Django or the tools: it only knows the bundled tools' names, arguments and result
shapes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentweb.runtime.gateway import ModelResponse, StreamsAfterComplete, ToolSpec
from agentweb.runtime.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    Usage,
)

from . import coordinate
from .address import plan_address
from .angry import plan_angry
from .cancel import plan_cancel
from .conversation import Answer, Conversation, Plan
from .damaged import plan_damaged
from .delivery import plan_delivery
from .duplicate_charge import plan_duplicate
from .general import plan_general
from .helpers import WRITES, finish, summary_of
from .policy_refund import plan_policy_refund
from .stock import plan_stock

__all__ = ["SCENARIOS", "DemoModel", "scenario_for"]

#: (scenario, phrases any of which selects it); the first match wins, so the order matters.
SCENARIOS: list[tuple[str, tuple[str, ...]]] = [
    ("duplicate_charge", (
        "charged twice", "double charged", "double-charged", "duplicate charge",
        "two charges", "billed twice", "charged two times",
    )),
    ("policy_refund", ()),  # refund wording + long use or a change of mind, see is_policy
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

REFUND_WORDS = ("refund", "money back", "my money")
POLICY_WORDS = (
    "months", "used it", "worn", "changed my mind", "don't like", "do not like",
    "no longer want", "weeks ago", "a year", "outside the return",
)  # fmt: skip


def is_policy(text: str) -> bool:
    return any(w in text for w in REFUND_WORDS) and any(w in text for w in POLICY_WORDS)


#: "Where is order A1001?", "where's the parcel", "status of my order": a delivery question
#: however it is worded (besides the fixed phrases of ``where_is``).
WHERE_IS = re.compile(
    r"\bwhere(?:'s| is| are)\b[^.?!]*\b(?:order|parcel|package|shipment|delivery|a\d{4,})\b"
    r"|\b(?:status of|track) (?:my |the |order |the order )*(?:order|parcel|package|a\d{4,})\b"
    r"|\border (?:a\d{4,} )?status\b|\bhas (?:my|the) (?:order|parcel|package) (?:shipped|left)\b"
)


def scenario_for(ticket_text: str) -> str:
    """The scenario the demo model plays for a ticket, from its words alone."""
    text = ticket_text.lower().replace("\u2019", "'")
    for name, phrases in SCENARIOS:
        if name == "policy_refund":
            if is_policy(text):
                return name
        elif any(p in text for p in phrases) or (name == "where_is" and WHERE_IS.search(text)):
            return name
    return "general"


PLANS: dict[str, Callable[[Conversation], Plan]] = {
    "not_received": lambda c: plan_delivery(c, claimed_missing=True),
    "where_is": lambda c: plan_delivery(c, claimed_missing=False),
    "damaged": plan_damaged,
    "policy_refund": plan_policy_refund,
    "cancel": plan_cancel,
    "address": plan_address,
    "stock": plan_stock,
    "duplicate_charge": plan_duplicate,
    "angry": plan_angry,
    "general": plan_general,
}


# --- the model -----------------------------------------------------------------------


class DemoModel(StreamsAfterComplete):
    """Plays the bundled ticket scenarios offline; deterministic, no network, no keys."""

    name = "demo"
    scripted = True

    def _reply(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        timeout: float | None,
        streamed: bool,
    ) -> ModelResponse:
        started = time.perf_counter()
        message = self._next(Conversation(messages, tools))
        return ModelResponse(
            message=message,
            usage=_usage(messages, tools, message),
            model=self.name,
            latency_ms=(time.perf_counter() - started) * 1000,
            finish_reason="tool_calls" if message.tool_calls else "stop",
        )

    def delta_pieces(self, text: str) -> list[str]:
        return _chunks(text)  # a few words at a time, as a model streams

    def _next(self, c: Conversation) -> AssistantMessage:
        if c.nudged and c.answered:
            # The loop (a validator, or an empty-reply reminder) objected to the answer:
            # answer again with only what the shop confirmed.
            return AssistantMessage(
                content="I re-checked what the tools confirmed and corrected my answer.\n\n"
                + summary_of(c)
            )
        plan_for = _delegation_plan(c) or PLANS[scenario_for(c.task)]
        for _ in range(len(WRITES) + 10):
            plan = plan_for(c)
            if isinstance(plan, Answer):
                return AssistantMessage(content=plan.text)
            offered = [(n, a, w) for n, a, w in plan.calls if n in c.offered]
            for name, _args, why in plan.calls:
                if name not in c.offered:
                    c.unavailable.add(name)
                    if name in WRITES:
                        c.recommended.append(why[:1].upper() + why[1:])
            if offered:
                return AssistantMessage(content=plan.thought, tool_calls=self._calls(c, offered))
        return AssistantMessage(content=finish(c, "I could not finish this ticket.").text)

    @staticmethod
    def _calls(c: Conversation, calls: list[tuple[str, dict[str, Any], str]]) -> list[ToolCall]:
        base = len(c.steps)
        return [
            ToolCall(id=f"call_{c.digest}_{base + i + 1:02d}", name=name, arguments=args)
            for i, (name, args, _why) in enumerate(calls)
        ]


def _delegation_plan(c: Conversation) -> Callable[[Conversation], Plan] | None:
    """A coordinator's ticket with a delivery and a billing part, or a specialist's task."""
    if coordinate.wants_delegation(c):
        return coordinate.plan_coordinate
    if c.task.startswith(coordinate.SHIPPING_TASK):
        return coordinate.plan_shipping_check
    if c.task.startswith(coordinate.BILLING_TASK):
        return coordinate.plan_billing_check
    return None


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
