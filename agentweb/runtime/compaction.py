"""The pieces of context compaction: protocol repair, tool-result digests, superseded
corrections, pinned facts and the text of summaries. ``LayeredContextPolicy`` (in
``context.py``) puts them together; each piece is a plain function, tested on its own."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage

__all__ = [
    "DEFAULT_FACT_KEYS",
    "DEFAULT_FACT_PATTERNS",
    "MONEY_KEYS",
    "REJECTED_PREFIX",
    "RUNTIME_REFUSALS",
    "TOOL_ERROR_PREFIX",
    "digest_result",
    "extract_facts",
    "refused_by_runtime",
    "render_facts",
    "render_steps",
    "repair",
    "superseded",
    "valid_protocol",
]

# The loop's text for a call a human rejected (loop.py): never dropped as a "correction".
REJECTED_PREFIX = "A human reviewer rejected this call"
# The loop's prefix of an error raised by the tool itself (other than ``ToolError``).
TOOL_ERROR_PREFIX = "Error: "
# How the loop's own refusals begin (arguments it could not use, repeats): a later call
# of the same tool that worked corrects them. Any other error came from the tool.
RUNTIME_REFUSALS: tuple[str, ...] = (
    "Invalid arguments for tool",
    "Unknown tool",
    "Duplicate of an identical call",
    "You already called",
    "Stopped: repeated",
    "The call was approved, but its arguments",
)
ARGUMENTS_HINT = " Send the arguments as one JSON object that matches the tool's schema."

# Keys whose values are pinned when they appear in tool arguments or tool results. The
# runtime knows no domain: a domain passes its own (``ContextHints.fact_keys``).
DEFAULT_FACT_KEYS: tuple[str, ...] = ("email",)
# Arguments that are amounts of money: a successful call with one is an amount decided.
MONEY_KEYS: tuple[str, ...] = ("amount", "price", "total", "credit", "cost")
# Ids written in text (the task, answers), by kind; group 1 is the value. Domain-given.
DEFAULT_FACT_PATTERNS: Mapping[str, str] = {}
_MAX_VALUE = 200


# -- protocol ------------------------------------------------------------------------------


def valid_protocol(messages: Sequence[Message]) -> list[int]:
    """Positions of ``messages`` to keep so that every tool result directly follows the
    assistant message that made its call, and every call has its result.

    A tool result without its call is dropped; a call without its result is removed from
    its message (``strip`` below does that); an assistant message left empty is dropped."""
    keep: list[int] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if isinstance(m, AssistantMessage) and m.tool_calls:
            ids = {c.id for c in m.tool_calls}
            block: list[int] = []
            j = i + 1
            seen: set[str] = set()
            while j < len(messages) and isinstance(messages[j], ToolMessage):
                t = messages[j]
                assert isinstance(t, ToolMessage)
                if t.call_id in ids and t.call_id not in seen:
                    block.append(j)
                    seen.add(t.call_id)
                j += 1
            if seen or m.content.strip():
                keep.append(i)
                keep.extend(block)
            i = j
            continue
        if not isinstance(m, ToolMessage):
            keep.append(i)
        i += 1
    return keep


def _args_key(call: ToolCall) -> str:
    return call.name + json.dumps(call.arguments, sort_keys=True, default=str)


def answered_calls(messages: Sequence[Message]) -> set[str]:
    return {m.call_id for m in messages if isinstance(m, ToolMessage)}


def strip_calls(message: AssistantMessage, keep: Iterable[str]) -> AssistantMessage:
    """``message`` with only the calls whose ids are in ``keep``."""
    wanted = set(keep)
    calls = [c for c in message.tool_calls if c.id in wanted]
    if len(calls) == len(message.tool_calls):
        return message
    return message.model_copy(update={"tool_calls": calls})


def repair(messages: Sequence[Message]) -> tuple[list[Message], list[int]]:
    """A valid sequence made of ``messages`` and the positions it kept."""
    keep = valid_protocol(messages)
    kept = [messages[i] for i in keep]
    answered = answered_calls(kept)
    out: list[Message] = []
    positions: list[int] = []
    for pos, m in zip(keep, kept, strict=True):
        if isinstance(m, AssistantMessage) and m.tool_calls:
            m = strip_calls(m, answered)
            if not m.tool_calls and not m.content.strip():
                continue
        out.append(m)
        positions.append(pos)
    return out, positions


# -- digests -------------------------------------------------------------------------------


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 60 else value[:57] + "…", ensure_ascii=False)
    return None


def _key_rank(key: str, fact_keys: Sequence[str]) -> int:
    k = key.lower()
    if k in fact_keys:
        return 0
    if k.endswith(("_id", "_number", "id")) or k in ("status", "state", "name", "title"):
        return 1
    if any(w in k for w in ("amount", "total", "price", "date", "_at", "count")):
        return 2
    return 3


def _describe(value: Any, fact_keys: Sequence[str], depth: int = 0) -> str:
    if isinstance(value, dict):
        scalars: list[tuple[int, str]] = []
        nested: list[str] = []
        for k, v in value.items():
            s = _scalar(v)
            if s is not None:
                scalars.append((_key_rank(str(k), fact_keys), f"{k}={s}"))
            elif isinstance(v, list):
                nested.append(f"{k}: {len(v)} item{'s' if len(v) != 1 else ''}")
                if v and depth < 1 and isinstance(v[0], dict):
                    firsts = [_describe(x, fact_keys, depth + 1) for x in v[:3]]
                    nested[-1] += " [" + "; ".join(firsts) + ("; …" if len(v) > 3 else "") + "]"
            elif isinstance(v, dict):
                nested.append(f"{k}: {{{_describe(v, fact_keys, depth + 1)}}}" if depth < 1 else k)
        scalars.sort(key=lambda r: r[0])
        limit = 10 if depth == 0 else 4
        parts = [s for _, s in scalars[:limit]]
        if len(scalars) > limit:
            parts.append(f"+{len(scalars) - limit} more fields")
        return ", ".join(parts + nested)
    if isinstance(value, list):
        head = "; ".join(_describe(x, fact_keys, depth + 1) for x in value[:3])
        return f"{len(value)} items [{head}{'; …' if len(value) > 3 else ''}]"
    return _scalar(value) or str(value)[:60]


def digest_result(
    tool: str, content: str, *, fact_keys: Sequence[str] = DEFAULT_FACT_KEYS, limit: int = 700
) -> str:
    """A short stand-in for a long tool result: its size, how many items, the key fields.
    The full result stays in the run's record (``state.messages`` and the events)."""
    head = (
        f"[digest of a {len(content):,}-character {tool} result; "
        "the full result is in the run record]"
    )
    try:
        data = json.loads(content)
    except ValueError:
        body = " ".join(content[:400].split())
        return f"{head} starts: {body}…"
    body = _describe(data, fact_keys)
    if len(body) > limit:
        body = body[: limit - 1] + "…"
    return f"{head} {body}"


# -- superseded corrections ----------------------------------------------------------------


def superseded(messages: Sequence[Message], start: int = 0) -> tuple[set[int], set[str]]:
    """What later messages made obsolete, from position ``start`` on.

    - A failed tool call once a later call of the same tool succeeded: a call the runtime
      refused (invalid arguments, a repeat: ``RUNTIME_REFUSALS``) is corrected by any later
      success; a call the tool itself failed (e.g. not found) only by a success with the
      same arguments (a retry), since its error says something. A human's rejection
      always stays. The call and its result go (call ids returned).
    - An empty answer and the runtime's nudge after it, once the model replied again.
    - An answer that drew an objection (the user message right after it), once a later
      answer drew another: only the latest objection stays (positions returned).
    """
    calls: dict[str, ToolCall] = {}
    results: dict[str, tuple[int, ToolMessage]] = {}
    for i in range(start, len(messages)):
        m = messages[i]
        if isinstance(m, AssistantMessage):
            for c in m.tool_calls:
                calls[c.id] = c
        elif isinstance(m, ToolMessage):
            results[m.call_id] = (i, m)
    ok_at: dict[str, list[tuple[int, str]]] = {}  # tool -> [(position, arguments)]
    for call_id, (i, t) in results.items():
        if not t.is_error and call_id in calls:
            ok_at.setdefault(t.name, []).append((i, _args_key(calls[call_id])))

    def corrected(call_id: str, i: int, t: ToolMessage) -> bool:
        if t.content.startswith(REJECTED_PREFIX) or call_id not in calls:
            return False
        later = [args for at, args in ok_at.get(t.name, ()) if at > i]
        if not later:
            return False
        if refused_by_runtime(t.content):  # arguments the runtime refused, then a call
            return True  # that worked
        return _args_key(calls[call_id]) in later  # the tool failed: only a retry replaces it

    dropped_calls = {
        call_id for call_id, (i, t) in results.items() if t.is_error and corrected(call_id, i, t)
    }
    dropped: set[int] = set()
    objections: list[tuple[int, int]] = []
    for i in range(max(start, 1), len(messages)):
        m, prev = messages[i], messages[i - 1]
        if not (isinstance(m, UserMessage) and isinstance(prev, AssistantMessage)):
            continue
        if prev.tool_calls:
            continue
        if not prev.content.strip():
            if any(isinstance(x, AssistantMessage) for x in messages[i + 1 :]):
                dropped.update((i - 1, i))
        else:
            objections.append((i - 1, i))
    for pair in objections[:-1]:
        dropped.update(pair)
    return dropped, dropped_calls


def refused_by_runtime(content: str) -> bool:
    """True when a failed call's result is the loop's refusal, not the tool's error."""
    return content.startswith(RUNTIME_REFUSALS) or content.endswith(ARGUMENTS_HINT)


# -- facts ---------------------------------------------------------------------------------


def _add(facts: dict[str, list[str]], key: str, value: Any) -> None:
    if value is None or isinstance(value, dict | list) or value == "":
        return
    text = str(value).strip()[:_MAX_VALUE]
    values = facts.setdefault(key, [])
    if text in values:
        values.remove(text)  # keep the latest mention last
    values.append(text)


def _walk(data: Any, keys: Sequence[str], facts: dict[str, list[str]], depth: int = 0) -> None:
    """Values of ``keys`` in ``data``: nested up to two levels, and in the first five
    entries of a list (a result listing 40 items is not 40 facts)."""
    if depth > 2:
        return
    if isinstance(data, dict):
        for k, v in data.items():
            if str(k).lower() in keys:
                _add(facts, str(k).lower(), v)
            elif isinstance(v, dict | list):
                _walk(v, keys, facts, depth + 1)
    elif isinstance(data, list):
        for x in data[:5]:
            _walk(x, keys, facts, depth + 1)


def _call_text(call: ToolCall, money_keys: Sequence[str] = MONEY_KEYS) -> str:
    ids = ", ".join(
        f"{k}={v}" for k, v in call.arguments.items() if k not in money_keys and _scalar(v)
    )
    return f"{call.name}({ids})"


def extract_facts(
    messages: Sequence[Message],
    facts: dict[str, list[str]],
    *,
    start: int = 0,
    keys: Sequence[str] = DEFAULT_FACT_KEYS,
    patterns: Mapping[str, str] = DEFAULT_FACT_PATTERNS,
    money_keys: Sequence[str] = MONEY_KEYS,
) -> None:
    """Add the facts of ``messages[start:]`` to ``facts`` (``{kind: [values]}``).

    Sources: ids in the user's and the model's text (``patterns``); values of ``keys`` in
    the arguments and the (JSON) result of each successful tool call; amounts decided (a successful
    call with a money argument) and calls a human rejected, with the reason."""
    compiled = [(k, re.compile(p)) for k, p in patterns.items()]
    calls: dict[str, ToolCall] = {}
    for m in messages[:start]:
        if isinstance(m, AssistantMessage):
            for c in m.tool_calls:
                calls[c.id] = c
    for m in messages[start:]:
        if isinstance(m, SystemMessage):
            continue
        if isinstance(m, UserMessage | AssistantMessage):
            for kind, rx in compiled:
                for match in rx.finditer(m.content):
                    _add(facts, kind, match.group(1) if rx.groups else match.group(0))
        if isinstance(m, AssistantMessage):
            for c in m.tool_calls:
                calls[c.id] = c
        elif isinstance(m, ToolMessage):
            call = calls.get(m.call_id)
            if m.is_error:
                if call is not None and m.content.startswith(REJECTED_PREFIX):
                    reason = m.content.partition("Reason:")[2].strip() or "no reason given"
                    args = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
                    _add(facts, "rejected", f"{call.name} {args}: {reason}")
                continue
            if call is not None:
                _walk(call.arguments, keys, facts)
            with contextlib.suppress(ValueError):
                _walk(json.loads(m.content), keys, facts)
            if call is not None:
                money = {k: v for k, v in call.arguments.items() if k in money_keys}
                if money:
                    amounts = ", ".join(f"{k}={v}" for k, v in money.items())
                    text = f"{_call_text(call, money_keys)}: {amounts} (done)"
                    _add(facts, "amount_decided", text)


def render_facts(facts: Mapping[str, Sequence[str]]) -> str:
    lines = [f"- {kind}: {'; '.join(values)}" for kind, values in facts.items() if values]
    return "\n".join(lines)


# -- summaries -----------------------------------------------------------------------------


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def render_steps(messages: Sequence[Message], *, result_chars: int = 160) -> list[str]:
    """One line per step: what the model said or called, and what came back (clipped)."""
    calls: dict[str, ToolCall] = {}
    lines: list[str] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            continue
        if isinstance(m, UserMessage):
            lines.append(f"- user: {_clip(m.content, result_chars)}")
        elif isinstance(m, AssistantMessage):
            if m.content.strip():
                lines.append(f"- assistant: {_clip(m.content, result_chars)}")
            for c in m.tool_calls:
                calls[c.id] = c
        elif isinstance(m, ToolMessage):
            call = calls.get(m.call_id)
            args = json.dumps(call.arguments, ensure_ascii=False) if call else "{}"
            status = "error" if m.is_error else "ok"
            lines.append(
                f"- {m.name}({_clip(args, 160)}) -> {status}: {_clip(m.content, result_chars)}"
            )
    return lines
