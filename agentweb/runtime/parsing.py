"""Lenient parsing of what models actually send.

- ``parse_arguments``: tool arguments as an object, empty string, double-encoded JSON,
  trailing commas, single quotes, fenced code.
- ``split_reasoning`` / ``ThinkFilter``: ``<think>`` blocks kept out of the answer.
- ``parse_text_calls``: the parser chain for models without native tool calls
  (``<tool_call>`` tags, also with Qwen3-Coder's ``<function=…><parameter=…>`` body →
  JSON call in a fenced block or whole reply → Llama "pythonic" ``[f(a=1)]`` → ReAct →
  answer).
- ``resolve_tool_name``: ``functions.get_x`` / ``default_api:get_x`` / ``tools/get_x`` →
  ``get_x`` when that rest is exactly one registered tool.
- ``ensure_unique_ids``: missing or duplicated call ids replaced by unique ones.

Nothing here evaluates model text: JSON is decoded, Python-looking calls are read with
``ast`` and ``ast.literal_eval`` on literal nodes only, and nesting deeper than
``MAX_ARGUMENT_DEPTH`` is an error, never a ``RecursionError``.
"""

from __future__ import annotations

import ast
import json
import math
import re
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .messages import ToolCall

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "ArgumentsParse",
    "TextCalls",
    "ThinkFilter",
    "ensure_unique_ids",
    "json_complete",
    "new_call_id",
    "parse_arguments",
    "parse_text_calls",
    "prune_deep_json",
    "resolve_tool_name",
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


MAX_ARGUMENT_DEPTH = 64  # nesting levels of call arguments; deeper is refused, not parsed


def parse_arguments(raw: Any) -> ArgumentsParse:
    """Recover a dict of arguments from whatever the provider sent."""
    if isinstance(raw, dict):
        if _too_deep(raw):
            return ArgumentsParse({}, _TOO_DEEP_RAW, _TOO_DEEP_ERROR)
        return ArgumentsParse(raw, None)
    if raw is None:
        return ArgumentsParse({}, None)
    if not isinstance(raw, str):
        got = _clip(repr(raw), 200)
        return ArgumentsParse({}, _dump(raw), f"arguments must be an object, got {got}")
    text = raw.strip()
    if not text or text == "null":  # no arguments: the tool's own schema decides
        return ArgumentsParse({}, None)
    if text == _TOO_DEEP_RAW:
        return ArgumentsParse({}, raw, _TOO_DEEP_ERROR)
    value = _loads(text)
    clean = value is not _FAILED and value is not _DEEP
    if value is _FAILED:
        value = _repair(text)
    for _ in range(2):  # double (or triple) encoded: a JSON string holding JSON
        if isinstance(value, str):
            inner = value.strip()
            value = _loads_or_repair(inner) if inner else {}
            clean = False
    if value is _DEEP or (isinstance(value, dict) and _maybe_deep(text) and _too_deep(value)):
        return ArgumentsParse({}, raw, _TOO_DEEP_ERROR)
    if isinstance(value, dict):
        return ArgumentsParse(value, None if clean else raw)
    if value is _FAILED:
        return ArgumentsParse({}, raw, f"arguments are not valid JSON: {_clip(raw, 200)}")
    return ArgumentsParse({}, raw, f"arguments must be a JSON object, got: {_clip(raw, 200)}")


_FAILED: Any = object()
_DEEP: Any = object()
_TOO_DEEP_ERROR = f"arguments are nested more than {MAX_ARGUMENT_DEPTH} levels deep"
_TOO_DEEP_RAW = "(arguments nested too deeply to show)"


def _loads(text: str) -> Any:
    """``json.loads`` that answers ``_FAILED`` or ``_DEEP`` instead of raising."""
    try:
        return json.loads(text)
    except ValueError:
        return _FAILED
    except RecursionError:
        return _DEEP


_JSON_MARKS = re.compile(r'[\\"\[\]{}]')


def prune_deep_json(text: str, keep: int = MAX_ARGUMENT_DEPTH + 16) -> str:
    """``text`` (JSON) with every container nested deeper than ``keep`` levels replaced
    by ``null``, so a reply too deep for ``json.loads`` can still be read; what it was
    inside stays deeper than ``MAX_ARGUMENT_DEPTH`` and is refused as arguments."""
    out: list[str] = []
    depth, last, skip_from = 0, 0, -1
    in_string, escaped_at = False, -1
    for m in _JSON_MARKS.finditer(text):
        ch, at = m.group(), m.start()
        if in_string:
            if at == escaped_at:  # the character after a backslash
                continue
            if ch == "\\":
                escaped_at = at + 1
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth == keep + 1:
                skip_from = at
        elif ch in "]}":
            if depth == keep + 1 and skip_from >= 0:
                out.append(text[last:skip_from])
                out.append("null")
                last, skip_from = at + 1, -1
            depth -= 1
    out.append(text[last:])
    return "".join(out)


def json_complete(text: str) -> bool:
    """True when ``text`` is one whole JSON value, not a prefix of one cut off mid-way."""
    return bool(text.strip()) and _loads(text) is not _FAILED


def _loads_or_repair(text: str) -> Any:
    value = _loads(text)
    return _repair(text) if value is _FAILED else value


def _maybe_deep(text: str) -> bool:
    return text.count("{") + text.count("[") > MAX_ARGUMENT_DEPTH


def _too_deep(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> bool:
    """True when ``value`` nests containers more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list | tuple):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _dump(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return _TOO_DEEP_RAW


def _repair(text: str) -> Any:
    m = _FENCE.match(text)
    if m:
        text = m.group(1).strip()
        value = _loads(text)
        if value is not _FAILED:
            return value
    fixed = _TRAILING_COMMA.sub(r"\1", text)
    value = _loads(fixed)
    if value is not _FAILED:
        return value
    if _maybe_deep(fixed):
        return _FAILED  # Python's parser refuses deep nesting anyway; don't try
    pythonish = re.sub(r"\b(true|false|null)\b", lambda m: _PY_WORDS[m.group(1)], fixed)
    try:
        return ast.literal_eval(pythonish)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
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
    form: str = "answer"  # "tags" | "json" | "pythonic" | "react" | "answer"


_TAG_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FUNCTION_TAG = re.compile(r"<function=([\w.:/-]+)>\s*(.*?)\s*</function>", re.S)
_FUNCTION_OPEN = re.compile(r"<function=\s*([\w.:/-]+)\s*>")
_PARAMETER = re.compile(
    r"<parameter=\s*([\w.-]+)\s*>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.S
)
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
_NAMESPACE_SEP = re.compile(r"[.:/]")


def resolve_tool_name(name: str, tool_names: Collection[str]) -> str | None:
    """``name`` itself when registered; else, for ``functions.get_x``, ``default_api:get_x``
    or ``tools/get_x``, the part after a prefix when that is exactly one registered tool."""
    if name in tool_names:
        return name
    if not _NAMESPACE_SEP.search(name):
        return None
    found = {name[m.end() :] for m in _NAMESPACE_SEP.finditer(name)}
    known = [n for n in found if n in tool_names]
    return known[0] if len(known) == 1 else None


def parse_text_calls(
    text: str,
    tool_params: Mapping[str, Collection[str]],
) -> TextCalls:
    """Find tool calls written into the reply text by a model without native tool calls.

    ``tool_params`` maps each registered tool name to its parameter names. JSON or a
    Python-looking call is only a call when it has the call shape and names a registered
    tool; explicit call syntax (``<tool_call>``, ``<function=…>…</function>``,
    ``<|python_tag|>``, ReAct ``Action:``) counts even for an unknown name, so the model
    hears back that the tool does not exist. A tool merely named in prose is no call.
    """
    if not text or not _may_hold_calls(text):
        return TextCalls(text)
    calls = _tagged_calls(text, tool_params)
    if calls is not None:
        return calls
    calls = _json_calls(text, tool_params)
    if calls is not None:
        return calls
    calls = _pythonic_calls(text, tool_params)
    if calls is not None:
        return calls
    calls = _react_calls(text, tool_params)
    if calls is not None:
        return calls
    final = _FINAL_ANSWER.search(text)
    if final and re.search(r"^\s*Thought\s*:", text, re.M | re.I):
        return TextCalls(final.group(1).strip())
    return TextCalls(text)


def _may_hold_calls(text: str) -> bool:
    """False when none of the readers below could find anything in ``text``: every call
    form needs one of these marks (tags, JSON, a call's parenthesis, a fence, Mistral's
    and Phi's prefixes), or a ReAct ``Action:`` / ``Final Answer:`` line. Most answers
    have none, and are then not scanned at all."""
    if any(mark in text for mark in _CALL_MARKS):
        return True
    if ":" not in text:
        return False
    low = text.lower()
    return "action" in low or "final" in low


_CALL_MARKS = ("<", "{", "[", "(", "`", "functools")


def _tagged_calls(text: str, tool_params: Mapping[str, Collection[str]]) -> TextCalls | None:
    calls: list[ToolCall] = []
    spans: list[tuple[int, int]] = []
    if "<tool_call>" in text:
        for m in _TAG_CALL.finditer(text):
            body = _FENCE.sub(lambda f: f.group(1), m.group(1)).strip()
            if "<function=" in body:  # Qwen3-Coder: <function=name><parameter=k>v</parameter>…
                found = _xml_functions(body)
            else:
                found = _calls_from_obj(
                    _loads_or_repair(body), tool_params, require_known=False, text=body
                )
            if found:
                calls.extend(found)
                spans.append(m.span())
    if "<function=" in text:
        for m in _FUNCTION_TAG.finditer(text):  # outside <tool_call>: only when closed
            if any(a <= m.start() < b for a, b in spans):
                continue
            calls.append(_function_call(m.group(1), m.group(2)))
            spans.append(m.span())
    if not calls:
        return None
    return TextCalls(_cut(text, spans), calls, "tags")


def _xml_functions(body: str) -> list[ToolCall]:
    """The ``<function=…>`` calls of one ``<tool_call>`` body; a missing ``</function>``
    (a stop token ate it) ends at the next function or the end of the block."""
    opens = list(_FUNCTION_OPEN.finditer(body))
    calls: list[ToolCall] = []
    for i, m in enumerate(opens):
        end = opens[i + 1].start() if i + 1 < len(opens) else len(body)
        inner = body[m.end() : end]
        close = inner.find("</function>")
        calls.append(_function_call(m.group(1), inner if close < 0 else inner[:close]))
    return calls


def _function_call(name: str, body: str) -> ToolCall:
    if "<parameter=" in body:
        arguments: dict[str, Any] = {}
        for p in _PARAMETER.finditer(body):
            arguments[p.group(1)] = _xml_value(p.group(2))
        args = parse_arguments(arguments)
    else:
        args = parse_arguments(body.strip())
    return ToolCall(
        id=new_call_id(), name=name.strip(), arguments=args.arguments, raw_arguments=args.raw
    )


def _xml_value(raw: str) -> Any:
    """A parameter's text: one leading and trailing newline dropped; a JSON object or array
    becomes one (the tool's schema coerces numbers and booleans from text)."""
    value = raw[1:] if raw.startswith("\n") else raw
    value = value[:-1] if value.endswith("\n") else value
    head = value.strip()[:1]
    if head in ("{", "[") and not _maybe_deep(value):
        parsed = _loads(value)
        if isinstance(parsed, dict | list):
            return parsed
    return value


def _json_calls(text: str, tool_params: Mapping[str, Collection[str]]) -> TextCalls | None:
    stripped = text.strip()
    for prefix in _CALL_PREFIXES:  # Mistral, Llama 3.x, Phi markers: explicit call syntax
        if stripped.startswith(prefix):
            body = stripped[len(prefix) :].strip()
            found = _calls_from_obj(
                _loads_or_repair(body), tool_params, require_known=False, text=body
            )
            if found:
                return TextCalls("", found, "json")
    if stripped[:1] in "{[":
        found = _calls_from_obj(
            _loads_or_repair(stripped), tool_params, require_known=True, text=stripped
        )
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
        found = _calls_from_obj(_loads_or_repair(body), tool_params, require_known=True, text=body)
        if found:
            calls.extend(found)
            spans.append(m.span())
    if not calls:
        return None
    return TextCalls(_cut(text, spans), calls, "json")


_PY_FENCE = re.compile(r"```(?:tool_code|tool_call)[ \t]*\n(.*?)```", re.S)
_PY_START = re.compile(r"\[?\s*[A-Za-z_][\w.]*\s*\(")
_PY_MAX_CHARS = 50_000


def _pythonic_calls(text: str, tool_params: Mapping[str, Collection[str]]) -> TextCalls | None:
    """Llama 3.x ``[get_x(a="1"), get_y(b=2)]`` (the whole reply, maybe after
    ``<|python_tag|>``) or Gemma's fenced ``tool_code`` block; arguments literals only."""
    stripped = text.strip()
    explicit = stripped.startswith("<|python_tag|>")
    if explicit:
        stripped = stripped[len("<|python_tag|>") :].strip()
    if _PY_START.match(stripped):
        found = _python_calls(stripped, tool_params, explicit=explicit)
        if found:
            return TextCalls("", found, "pythonic")
    if "```tool_" not in text:
        return None
    calls: list[ToolCall] = []
    spans: list[tuple[int, int]] = []
    for m in _PY_FENCE.finditer(text):
        found = _python_calls(m.group(1).strip(), tool_params, explicit=True)
        if found:
            calls.extend(found)
            spans.append(m.span())
    if not calls:
        return None
    return TextCalls(_cut(text, spans), calls, "pythonic")


def _python_calls(
    src: str, tool_params: Mapping[str, Collection[str]], *, explicit: bool
) -> list[ToolCall]:
    """Calls in a Python expression (a call, or a list of calls), read with ``ast``: never
    evaluated. Without explicit call syntax every name must be a registered tool."""
    if len(src) > _PY_MAX_CHARS or not _PY_START.match(src):
        return []
    try:
        tree = ast.parse(src, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    body = tree.body
    nodes = body.elts if isinstance(body, ast.List | ast.Tuple) else [body]
    calls: list[ToolCall] = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            return []
        name = _dotted_name(node.func)
        if name is None:
            return []
        known = resolve_tool_name(name, tool_params)
        if known is None and not explicit:
            return []
        arguments = _literal_arguments(node, tool_params.get(known or name, ()))
        if arguments is None:  # not literals: explicit call syntax, but unreadable arguments
            raw = ast.get_source_segment(src, node) or name
            args = ArgumentsParse({}, raw, f"arguments must be literal values: {_clip(raw, 200)}")
        else:
            args = parse_arguments(arguments)
        calls.append(
            ToolCall(
                id=new_call_id(),
                name=known or name,
                arguments=args.arguments,
                raw_arguments=args.raw,
            )
        )
    return calls


def _dotted_name(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _literal_arguments(node: ast.Call, params: Collection[str]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    names = list(params)  # positional arguments fill the parameters in their order
    if len(node.args) > len(names):
        return None
    pairs: list[tuple[str | None, ast.expr]] = [
        *zip(names, node.args, strict=False),
        *((kw.arg, kw.value) for kw in node.keywords),
    ]
    for key, value_node in pairs:
        if key is None or isinstance(value_node, ast.Starred):  # **kwargs, *args
            return None
        try:
            value = ast.literal_eval(value_node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        ok, value = _json_value(value)
        if not ok:
            return None
        out[key] = value
    return out


def _json_value(value: Any) -> tuple[bool, Any]:
    """Literal → JSON value (tuples become lists); sets, bytes, complex, inf/nan refused."""
    if value is None or isinstance(value, str | bool | int):
        return True, value
    if isinstance(value, float):
        return math.isfinite(value), value
    if isinstance(value, list | tuple):
        items = [_json_value(v) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    if isinstance(value, dict):
        pairs = [(k, _json_value(v)) for k, v in value.items()]
        ok = all(isinstance(k, str) and r[0] for k, r in pairs)
        return ok, {k: r[1] for k, r in pairs}
    return False, None


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
    known = resolve_tool_name(name, tool_params)
    if inp is None and known is None:
        return None  # "Action: none needed" in prose is not a call
    name = known or name
    raw = inp.group(1).strip() if inp else ""
    raw = _FENCE.sub(lambda f: f.group(1), raw).strip()
    args = parse_arguments(raw)
    if args.error is not None and raw[:1] not in ("{", "["):  # plain text, not broken JSON
        params = list(tool_params.get(name, ()))
        if len(params) == 1:
            value = raw.strip().strip("\"'")
            args = parse_arguments({params[0]: value})
    call = ToolCall(id=new_call_id(), name=name, arguments=args.arguments, raw_arguments=args.raw)
    return TextCalls(text[: action.start()].strip(), [call], "react")


_DEEP_NAME = re.compile(r'^\s*[\[{]\s*\{?\s*"(?:name|tool|function)"\s*:\s*"([\w.:/-]+)"')


def _calls_from_obj(
    obj: Any,
    tool_params: Mapping[str, Collection[str]],
    *,
    require_known: bool,
    text: str = "",
) -> list[ToolCall]:
    if obj is _DEEP:  # too deep to read: a call of a named tool gets the error as its result
        m = _DEEP_NAME.match(text)
        name = m and (resolve_tool_name(m.group(1), tool_params) or m.group(1))
        if not name or (require_known and name not in tool_params):
            return []
        return [ToolCall(id=new_call_id(), name=name, raw_arguments=_TOO_DEEP_RAW)]
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
    known = resolve_tool_name(name, tool_params)
    if require_known and known is None:
        return None
    name = known or name
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
