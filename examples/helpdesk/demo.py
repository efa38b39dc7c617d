"""The helpdesk's scripted ``demo`` model: plays a few IT requests offline and
deterministically, through the same message format as a real model. It decides each
turn from the conversation alone (the request and the tool results so far); errors and
rejections are read and answered, never retried. Uses only ``agentweb.runtime``."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentweb.runtime import (
    AssistantMessage,
    Message,
    ModelResponse,
    StreamsAfterComplete,
    ToolCall,
    ToolMessage,
    ToolSpec,
    Usage,
    UserMessage,
)

PRODUCTS = ("adobe-cc", "figma", "jetbrains", "office", "zoom")
_USERNAME = re.compile(r"\b([a-z]\.[a-z]{2,})\b")
_ASSET = re.compile(r"\b((?:LT|PH)-\d{4})\b", re.IGNORECASE)


class _Chat:
    def __init__(self, messages: Sequence[Message]) -> None:
        users = [m for m in messages if isinstance(m, UserMessage)]
        self.task = users[0].content if users else ""
        self.text = self.task.lower()
        self.nudged = len(users) > 1 and isinstance(messages[-1], UserMessage)
        self.calls: dict[str, ToolCall] = {}
        self.results: dict[str, tuple[bool, Any]] = {}  # tool name -> (ok, result or error)
        self.steps = 0
        for m in messages:
            if isinstance(m, AssistantMessage):
                for c in m.tool_calls:
                    self.calls[c.id] = c
                    self.steps += 1
            elif isinstance(m, ToolMessage) and m.call_id in self.calls:
                name = self.calls[m.call_id].name
                if m.is_error:
                    self.results[name] = (False, m.content)
                else:
                    try:
                        self.results[name] = (True, json.loads(m.content))
                    except ValueError:
                        self.results[name] = (True, m.content)

    def ok(self, name: str) -> Any:
        done = self.results.get(name)
        return done[1] if done and done[0] else None

    def failed(self, name: str) -> str | None:
        done = self.results.get(name)
        return done[1] if done and not done[0] else None

    def username(self) -> str | None:
        m = _USERNAME.search(self.text)
        if m:
            return m.group(1)
        found = (self.ok("find_account") or {}).get("accounts") or []
        return found[0]["username"] if len(found) == 1 else None

    def product(self) -> str | None:
        text = self.text.replace("adobe creative cloud", "adobe-cc").replace(
            "photoshop", "adobe-cc"
        )
        return next((p for p in PRODUCTS if p in text), None)


Plan = tuple[str, dict[str, Any], str] | str  # (tool, arguments, thought) or the answer


def _who(c: _Chat) -> Plan | None:
    """The account the request is about: named, or found by the name in the request."""
    if c.username():
        return None
    if "find_account" not in c.results:
        name = re.search(r"\b(?:for|from|i am|i'm|this is)\s+([A-Z][a-z]+)", c.task)
        query = name.group(1) if name else c.task.split()[0]
        return ("find_account", {"query": query}, f"First I need the account of {query}.")
    return "I could not tell which account this is about; ask for the username (like a.kim)."


def _outcome(c: _Chat, tool: str, done: Callable[[Any], str]) -> str | None:
    failed = c.failed(tool)
    if failed is None:
        result = c.ok(tool)
        return done(result) if result is not None else None
    if failed.startswith("A human reviewer rejected this call"):
        reason = failed.partition("Reason:")[2].strip() or "no reason given"
        return f"Not done: the approver rejected {tool} ({reason}). Nothing was changed."
    return f"Not done: {failed}"


def _password(c: _Chat) -> Plan:
    user = c.username()
    assert user is not None
    if "get_account" not in c.results:
        return ("get_account", {"username": user}, f"Let me look at {user}'s account.")
    if "reset_password" not in c.results:
        return (
            "reset_password",
            {"username": user, "reason": "User forgot the password (helpdesk request)."},
            "A reset sends a one-time link to the user's own email; it needs approval.",
        )
    return (
        _outcome(
            c,
            "reset_password",
            lambda r: (
                f"Password reset for {user}: a one-time link went to "
                f"{r['reset_link_sent_to']} (valid {r['expires_in_hours']} h)."
            ),
        )
        or "Waiting for the reset."
    )


def _locked(c: _Chat) -> Plan:
    user = c.username()
    assert user is not None
    account = c.ok("get_account")
    if account is None and "get_account" not in c.results:
        return ("get_account", {"username": user}, f"Let me see why {user} is locked out.")
    if account is None:
        return f"Not done: {c.failed('get_account')}"
    if not account["locked"]:
        return f"{user} is not locked (0 recent failed logins to clear); ask what error they see."
    if "unlock_account" not in c.results:
        return (
            "unlock_account",
            {"username": user, "reason": f"{account['failed_logins']} failed logins; user asked"},
            f"{user} is locked after {account['failed_logins']} failed logins; I'll unlock it.",
        )
    return (
        _outcome(c, "unlock_account", lambda r: f"Unlocked {user}; they can sign in again.") or ""
    )


def _licence(c: _Chat) -> Plan:
    user, product = c.username(), c.product()
    assert user is not None
    if product is None:
        return "Which product? I can assign: " + ", ".join(PRODUCTS) + "."
    if "licence_seats" not in c.results:
        return ("licence_seats", {"product": product}, f"Are there free {product} seats?")
    seats = c.ok("licence_seats") or {}
    if seats.get("free", 0) <= 0:
        return f"No free {product} seat ({seats.get('seats')} in use); nothing was assigned."
    if "assign_licence" not in c.results:
        return (
            "assign_licence",
            {"username": user, "product": product, "reason": c.task[:160]},
            f"{seats['free']} {product} seats are free; assigning one to {user}.",
        )
    return (
        _outcome(
            c,
            "assign_licence",
            lambda r: f"Assigned a {product} licence to {user} ({r['seats_free']} seats left).",
        )
        or ""
    )


def _device(c: _Chat) -> Plan:
    user = c.username()
    assert user is not None
    account = c.ok("get_account")
    if "get_account" not in c.results:
        return ("get_account", {"username": user}, f"Which devices does {user} have?")
    if account is None:
        return f"Not done: {c.failed('get_account')}"
    tag = _ASSET.search(c.task)
    asset = tag.group(1).upper() if tag else (account["devices"] or [None])[0]
    if asset is None:
        return f"{user} has no device on record; ask for the asset tag."
    if "open_hardware_ticket" not in c.results:
        return (
            "open_hardware_ticket",
            {"asset_tag": asset, "problem": c.task[:200]},
            f"I'll open a repair ticket for {asset}.",
        )
    return (
        _outcome(
            c,
            "open_hardware_ticket",
            lambda r: (
                f"Repair ticket {r['ticket_number']} opened for {asset}"
                + ("; a loaner laptop is available at the desk." if r.get("loaner") else ".")
            ),
        )
        or ""
    )


def _plan(c: _Chat) -> Plan:
    who = _who(c)
    if who is not None:
        return who
    t = c.text
    if "licen" in t or c.product():
        return _licence(c)
    if "forgot" in t or "reset" in t or "password" in t:
        return _password(c)
    if "locked" in t or "log in" in t or "sign in" in t:
        return _locked(c)
    if any(w in t for w in ("laptop", "phone", "screen", "broken", "device", "keyboard")):
        return _device(c)
    account = c.ok("get_account")
    if account is None and "get_account" not in c.results:
        user = c.username()
        return ("get_account", {"username": user}, f"Let me look at {user}'s account.")
    return f"Looked at {c.username()}: " + json.dumps(account or {}, sort_keys=True)[:300]


class HelpdeskDemoModel(StreamsAfterComplete):
    """Scripted, deterministic, offline."""

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
        c = _Chat(messages)
        plan = (
            _plan(c)
            if not c.nudged
            else "I re-checked the tool results: "
            + json.dumps({k: v[0] for k, v in c.results.items()}, sort_keys=True)
        )
        offered = {t.name for t in tools}
        if isinstance(plan, tuple) and plan[0] not in offered:
            plan = f"I would use {plan[0]} ({plan[2]}), but this profile does not offer it."
        if isinstance(plan, tuple):
            name, args, thought = plan
            call = ToolCall(id=f"hd_{c.steps + 1:02d}", name=name, arguments=args)
            message = AssistantMessage(content=thought, tool_calls=[call])
        else:
            message = AssistantMessage(content=plan)
        chars = sum(len(m.content) for m in messages)
        return ModelResponse(
            message=message,
            usage=Usage(input_tokens=chars // 4 + 1, output_tokens=len(message.content) // 4 + 1),
            model=self.name,
            latency_ms=(time.perf_counter() - started) * 1000,
            finish_reason="tool_calls" if message.tool_calls else "stop",
        )

    def delta_pieces(self, text: str) -> list[str]:
        return [text]  # a streamed reply arrives in one piece
