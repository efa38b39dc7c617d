"""Lenient parsing of what models actually send.

- ``parse_arguments``: tool arguments as an object, empty string, double-encoded JSON,
  trailing commas, single quotes, fenced code.
- ``split_reasoning`` / ``ThinkFilter``: ``<think>`` blocks kept out of the answer.
- ``parse_text_calls``: the parser chain for models without native tool calls
  (``<tool_call>`` tags → JSON call in a fenced block or whole reply → ReAct → answer).
- ``ensure_unique_ids``: missing or duplicated call ids replaced by unique ones.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .messages import ToolCall

__all__ = [
    "ArgumentsParse",
    "TextCalls",
    "ThinkFilter",
    "ensure_unique_ids",
    "new_call_id",
    "parse_arguments",
    "parse_text_calls",
    "split_reasoning",
]


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


# -- arguments ------------------------------------------------------------------------------


@dataclass(slots=True)
class ArgumentsParse:
    arguments: dict[str, Any]
    raw: str | None  # set when the raw text was not clean JSON (repaired or failed)
    error: str | None = None  # set when no object could be recovered


_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)
_PY_WORDS = {"true": "True", "false": "False", "null": "None"}


def parse_arguments(raw: Any) -> ArgumentsParse:
    """Recover a dict of arguments from whatever the provider sent."""
    if isinstance(raw, dict):
        return ArgumentsParse(raw, None)
    if raw is None:
        return ArgumentsParse({}, None)
    if not isinstance(raw, str):
        return ArgumentsParse({}, json.dumps(raw), f"arguments must be an object, got {raw!r}")
    text = raw.strip()
    if not text:
        return ArgumentsParse({}, None)
    try:
        value = json.loads(text)
    except ValueError:
        value = _repair(text)
        clean = False
    else:
        clean = True
    for _ in range(2):  # double (or triple) encoded: a JSON string holding JSON
        if isinstance(value, str):
            inner = value.strip()
            value = _loads_or_repair(inner) if inner else {}
            clean = False
    if isinstance(value, dict):
        return ArgumentsParse(value, None if clean else raw)
    if value is _FAILED:
        return ArgumentsParse({}, raw, f"arguments are not valid JSON: {_clip(raw, 200)}")
    return ArgumentsParse({}, raw, f"arguments must be a JSON object, got: {_clip(raw, 200)}")


_FAILED: Any = object()


def _loads_or_repair(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _repair(text)


def _repair(text: str) -> Any:
    m = _FENCE.match(text)
    if m:
        text = m.group(1).strip()
        try:
            return json.loads(text)
        except ValueError:
            pass
    fixed = _TRAILING_COMMA.sub(r"\1", text)
    try:
        return json.loads(fixed)
    except ValueError:
        pass
    pythonish = re.sub(r"\b(true|false|null)\b", lambda m: _PY_WORDS[m.group(1)], fixed)
    try:
        return ast.literal_eval(pythonish)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _FAILED


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + "…"


# -- reasoning ------------------------------------------------------------------------------

_THINK_TAGS = ("think", "thinking", "reasoning")
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>(.*?)(?:</\1>|$)", re.S | re.I)


def split_reasoning(text: str) -> tuple[str, str | None]:
    """Split ``<think>…</think>`` blocks (also unclosed, or a lone leading ``</think>``)
    out of ``text``; returns (answer, reasoning or None)."""
    if "<" not in text:
        return text, None
    low = text.lower()
    if not any(f"<{t}>" in low or f"</{t}>" in low for t in _THINK_TAGS):
        return text, None
    parts: list[str] = []
    # Some servers strip the opening tag: "reasoning…</think>answer"
    m = re.match(r"^(.*?)</(think|thinking|reasoning)>", text, re.S | re.I)
    if m and f"<{m.group(2).lower()}>" not in m.group(1).lower():
        parts.append(m.group(1).strip())
        text = text[m.end() :]

    def take(match: re.Match[str]) -> str:
        parts.append(match.group(2).strip())
        return ""

    answer = _THINK_BLOCK.sub(take, text).strip()
    reasoning = "\n\n".join(p for p in parts if p)
    return answer, reasoning or None


class ThinkFilter:
    """Streaming counterpart of ``split_reasoning``: feed text fragments, get back the
    part that belongs to the answer; reasoning accumulates in ``reasoning``."""

    _OPEN = tuple(f"<{t}>" for t in _THINK_TAGS)

    def __init__(self) -> None:
        self._pending = ""
        self._inside: str | None = None
        self.reasoning_parts: list[str] = []

    @property
    def reasoning(self) -> str | None:
        text = "".join(self.reasoning_parts).strip()
        return text or None

    def feed(self, text: str) -> str:
        if not self._pending and self._inside is None and "<" not in text:
            return text
        buf = self._pending + text
        self._pending = ""
        out: list[str] = []
        while buf:
            if self._inside is not None:
                close = f"</{self._inside}>"
                i = buf.lower().find(close)
                if i < 0:
                    keep = _partial_suffix(buf, (close,))
                    self.reasoning_parts.append(buf[: len(buf) - keep])
                    self._pending = buf[len(buf) - keep :]
                    return "".join(out)
                self.reasoning_parts.append(buf[:i])
                buf = buf[i + len(close) :]
                self._inside = None
                continue
            low = buf.lower()
            hits = [(low.find(tag), tag) for tag in self._OPEN if tag in low]
            if not hits:
                keep = _partial_suffix(buf, self._OPEN)
                out.append(buf[: len(buf) - keep])
                self._pending = buf[len(buf) - keep :]
                return "".join(out)
            i, tag = min(hits)
            out.append(buf[:i])
            buf = buf[i + len(tag) :]
            self._inside = tag[1:-1]
        return "".join(out)

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        if self._inside is not None:
            self.reasoning_parts.append(rest)
            return ""
        return rest


def _partial_suffix(buf: str, tags: Iterable[str]) -> int:
    """Length of the longest suffix of ``buf`` that could start one of ``tags``."""
    low = buf.lower()
    best = 0
    for tag in tags:
        for n in range(min(len(tag) - 1, len(low)), 0, -1):
            if tag.startswith(low[-n:]):
                best = max(best, n)
                break
    return best


# -- text tool calls -------------------------------------------------------------------------


@dataclass(slots=True)
class TextCalls:
    """Result of the parser chain: the answer text and the calls found (maybe none)."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    form: str = "answer"  # "tags" | "json" | "react" | "answer"


_TAG_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FUNCTION_TAG = re.compile(r"<function=([\w.-]+)>\s*(.*?)\s*</function>", re.S)
_FENCED = re.compile(r"```([a-zA-Z_]*)[ \t]*\n(.*?)```", re.S)
_ACTION = re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.M | re.I)
_ACTION_INPUT = re.compile(
    r"^\s*Action\s*Input\s*:\s*(.*?)(?=^\s*(?:Observation|Thought|Action|Final Answer)\s*:|\Z)",
    re.M | re.S | re.I,
)
_FINAL_ANSWER = re.compile(r"^\s*Final\s*Answer\s*:\s*(.*)\Z", re.M | re.S | re.I)
_CALL_PREFIXES = ("[TOOL_CALLS]", "<|python_tag|>", "functools")
_NAME_KEYS = ("name", "tool", "tool_name", "function", "action")
_ARGS_KEYS = ("arguments", "args", "parameters", "input", "tool_input", "action_input")


def parse_text_calls(
    text: str,
    tool_params: Mapping[str, Collection[str]],
) -> TextCalls:
    """Find tool calls written into the reply text by a model without native tool calls.

    ``tool_params`` maps each registered tool name to its parameter names. JSON is only
    a call when it has the call shape and names a registered tool; explicit call syntax
    (``<tool_call>``, ReAct ``Action:``) counts even for an unknown name, so the model
    hears back that the tool does not exist.
    """
    if not text:
        return TextCalls(text)
    calls = _tagged_calls(text, tool_params)
    if calls is not None:
        return calls
    calls = _json_calls(text, tool_params)
    if calls is not None:
        return calls
    calls = _react_calls(text, tool_params)
    if calls is not None:
        return calls
    final = _FINAL_ANSWER.search(text)
    if final and re.search(r"^\s*Thought\s*:", text, re.M | re.I):
        return TextCalls(final.group(1).strip())
    return TextCalls(text)


def _tagged_calls(text: str, tool_params: Mapping[str, Collection[str]]) -> TextCalls | None:
    calls: list[ToolCall] = []
    spans: list[tuple[int, int]] = []
    if "<tool_call>" in text:
        for m in _TAG_CALL.finditer(text):
            body = _FENCE.sub(lambda f: f.group(1), m.group(1)).strip()
            obj = _loads_or_repair(body)
            found = _calls_from_obj(obj, tool_params, require_known=False)
            if found:
                calls.extend(found)
                spans.append(m.span())
    if "<function=" in text:
        for m in _FUNCTION_TAG.finditer(text):
            args = parse_arguments(m.group(2))
            calls.append(
                ToolCall(
                    id=new_call_id(),
                    name=m.group(1),
                    arguments=args.arguments,
                    raw_arguments=args.raw,
                )
            )
            spans.append(m.span())
    if not calls:
        return None
    return TextCalls(_cut(text, spans), calls, "tags")


def _json_calls(text: str, tool_params: Mapping[str, Collection[str]]) -> TextCalls | None:
    stripped = text.strip()
    for prefix in _CALL_PREFIXES:  # Mistral, Llama 3.x, Phi markers: explicit call syntax
        if stripped.startswith(prefix):
            body = stripped[len(prefix) :].strip()
            found = _calls_from_obj(_loads_or_repair(body), tool_params, require_known=False)
            if found:
                return TextCalls("", found, "json")
    if stripped[:1] in "{[":
        found = _calls_from_obj(_loads_or_repair(stripped), tool_params, require_known=True)
        if found:
            return TextCalls("", found, "json")
    if "```" not in text:
        return None
    calls: list[ToolCall] = []
    spans: list[tuple[int, int]] = []
    for m in _FENCED.finditer(text):
        if m.group(1).lower() not in ("", "json", "tool_call", "tool_code", "tool", "function"):
            continue
        body = m.group(2).strip()
        if body[:1] not in "{[":
            continue
        found = _calls_from_obj(_loads_or_repair(body), tool_params, require_known=True)
        if found:
            calls.extend(found)
            spans.append(m.span())
    if not calls:
        return None
    return TextCalls(_cut(text, spans), calls, "json")


def _react_calls(text: str, tool_params: Mapping[str, Collection[str]]) -> TextCalls | None:
    action = _ACTION.search(text)
    if not action:
        return None
    name = action.group(1).strip().strip("`'\"")
    name = re.sub(r"\(.*\)$", "", name).strip()
    if not re.fullmatch(r"[\w.-]+", name):
        return None
    final = _FINAL_ANSWER.search(text)
    if final and final.start() < action.start():
        return None
    inp = _ACTION_INPUT.search(text, action.end())
    if inp is None and name not in tool_params:
        return None  # "Action: none needed" in prose is not a call
    raw = inp.group(1).strip() if inp else ""
    raw = _FENCE.sub(lambda f: f.group(1), raw).strip()
    args = parse_arguments(raw)
    if args.error is not None:
        params = list(tool_params.get(name, ()))
        if len(params) == 1:
            value = raw.strip().strip("\"'")
            args = parse_arguments({params[0]: value})
    call = ToolCall(id=new_call_id(), name=name, arguments=args.arguments, raw_arguments=args.raw)
    return TextCalls(text[: action.start()].strip(), [call], "react")


def _calls_from_obj(
    obj: Any, tool_params: Mapping[str, Collection[str]], *, require_known: bool
) -> list[ToolCall]:
    items = obj if isinstance(obj, list) else [obj]
    calls: list[ToolCall] = []
    for item in items:
        call = _call_from_dict(item, tool_params, require_known=require_known)
        if call is None:
            return []  # all or nothing: a list that is not all calls is data
        calls.append(call)
    return calls


def _call_from_dict(
    item: Any, tool_params: Mapping[str, Collection[str]], *, require_known: bool
) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):  # {"type": "function", "function": {...}}
        item = item["function"]
    name = next((item[k] for k in _NAME_KEYS if isinstance(item.get(k), str)), None)
    if name is None:
        return None
    if require_known and name not in tool_params:
        return None
    args_key = next((k for k in _ARGS_KEYS if k in item), None)
    extra = set(item) - {*_NAME_KEYS, *_ARGS_KEYS, "id", "type"}
    if args_key is None:
        if extra:
            return None
        raw_args: Any = {}
    else:
        if require_known and extra:
            return None
        raw_args = item[args_key]
    args = parse_arguments(raw_args)
    call_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else None
    return ToolCall(
        id=call_id or new_call_id(), name=name, arguments=args.arguments, raw_arguments=args.raw
    )


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    out: list[str] = []
    pos = 0
    for start, end in sorted(spans):
        out.append(text[pos:start])
        pos = end
    out.append(text[pos:])
    return "".join(out).strip()


# -- ids ------------------------------------------------------------------------------------


def ensure_unique_ids(calls: list[ToolCall], seen: set[str] | None = None) -> list[ToolCall]:
    """Give every call a non-empty id not in ``seen`` nor used earlier in ``calls``.
    Ids that are fine are kept verbatim (providers expect them echoed back)."""
    used = set() if seen is None else seen
    out: list[ToolCall] = []
    for call in calls:
        if not call.id or call.id in used:
            call = call.model_copy(update={"id": new_call_id()})
        used.add(call.id)
        out.append(call)
    return out
