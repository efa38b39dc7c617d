"""What the demo model reads from a conversation: the ticket, ids, and every tool call
with its outcome. No Django, no tools: only the runtime's message types."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentweb.runtime.gateway import ToolSpec
from agentweb.runtime.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

SIGNATURE = "Best regards,\nThe Support Team"
REJECTED_PREFIX = "A human reviewer rejected this call."


ORDER_ID = re.compile(r"\b(A\d{4,})\b", re.IGNORECASE)
CUSTOMER_ID = re.compile(r"\b(C\d{3,})\b")
SKU = re.compile(r"\b([A-Z]{3}-\d{4})\b")
TRACKING = re.compile(r"\b(1Z[0-9A-Z]{16})\b")
NAMED = re.compile(r"\b([A-Z][\w'\-]+(?: [A-Z][\w'\-]+){0,2}) \((C\d{3,})\)")
ADDRESS = re.compile(
    r"(?:new address|ship (?:it |the order |my order )?to|send it to|deliver (?:it )?to)"
    r"\s*(?:is|will be)?\s*[:\-]?\s*(.+)",
    re.IGNORECASE,
)
TODAY = re.compile(r"\b(?:it is|today is|now:?)\s+(20\d\d-\d\d-\d\d)\b", re.IGNORECASE)


@dataclass
class Step:
    call: ToolCall
    done: bool = False
    ok: bool = False
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    rejected: bool = False


@dataclass
class Act:
    calls: list[tuple[str, dict[str, Any], str]]  # (tool, arguments, what it is for)
    thought: str


@dataclass
class Answer:
    text: str


Plan = Act | Answer


class Conversation:
    """What the model knows: the ticket, ids, and every tool call with its outcome."""

    def __init__(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> None:
        self.offered = {t.name for t in tools}
        self.system = "\n".join(m.content for m in messages if isinstance(m, SystemMessage))
        users = [m for m in messages if isinstance(m, UserMessage)]
        self.task = users[0].content if users else ""
        self.text = self.task.lower().replace("\u2019", "'")
        self.steps: list[Step] = []
        by_id: dict[str, Step] = {}
        self.answered = False
        for m in messages:
            if isinstance(m, AssistantMessage):
                if m.content and not m.tool_calls:
                    self.answered = True
                for call in m.tool_calls:
                    step = Step(call)
                    self.steps.append(step)
                    by_id[call.id] = step
            elif isinstance(m, ToolMessage) and m.call_id in by_id:
                read_result(by_id[m.call_id], m)
        last = messages[-1] if messages else None
        self.nudged = isinstance(last, UserMessage) and len(users) > 1
        self.unavailable: set[str] = set()
        self.recommended: list[str] = []
        self.digest = hashlib.sha1(self.task.encode(), usedforsecurity=False).hexdigest()[:8]

    # tool history
    def last(self, name: str) -> Step | None:
        for step in reversed(self.steps):
            if step.call.name == name:
                return step
        return None

    def tried(self, name: str) -> bool:
        return name in self.unavailable or self.last(name) is not None

    def ok(self, name: str) -> dict[str, Any] | None:
        step = self.last(name)
        if step is None or not step.ok:
            return None
        result = step.result
        if isinstance(result, dict) and result.get("dry_run"):
            # a dry run's would-call (DESIGN §14): the scenario goes on as if it had been
            # done with these arguments
            return {**(result.get("arguments") or {}), "dry_run": True}
        return result

    def failed(self, name: str) -> str | None:
        step = self.last(name)
        if step is None or step.ok or step.rejected or not step.done:
            return None
        return step.error

    def rejected(self, name: str) -> str | None:
        step = self.last(name)
        return step.error if step is not None and step.rejected else None

    # ids and names
    def find(self, pattern: re.Pattern[str]) -> str | None:
        for source in (self.task, self.system):
            m = pattern.search(source)
            if m:
                return m.group(1).upper()
        return None

    @property
    def order_id(self) -> str | None:
        found = self.find(ORDER_ID)
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
        return self.find(CUSTOMER_ID)

    @property
    def first_name(self) -> str:
        for name, key in (("get_customer", "name"), ("get_order", "customer_name")):
            result = self.ok(name)
            if result and result.get(key):
                return str(result[key]).split()[0]
        m = NAMED.search(self.task) or NAMED.search(self.system)
        return m.group(1).split()[0] if m else "there"

    @property
    def sku(self) -> str | None:
        return self.find(SKU)

    @property
    def new_address(self) -> str | None:
        for m in ADDRESS.finditer(self.task):
            address = m.group(1).strip().splitlines()[0].strip().rstrip(".!")
            # A usable address has a number and at least "street, city".
            if any(ch.isdigit() for ch in address) and "," in address and len(address) >= 10:
                return address
        return None

    @property
    def today(self) -> str | None:
        m = TODAY.search(self.system)
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
    def question(self) -> str:
        """The ticket's words, each once: its subject and body (a task of one line is
        both, and is said once)."""
        lines = [ln.strip() for ln in self.task.splitlines() if ln.strip()]
        rest = " ".join(lines[1:])
        return f"{self.subject} {rest}".strip() if rest else self.subject

    @property
    def body(self) -> str:
        lines = [ln for ln in self.task.splitlines() if ln.strip()]
        return " ".join(lines[1:]) if len(lines) > 1 else self.task


def read_result(step: Step, message: ToolMessage) -> None:
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
