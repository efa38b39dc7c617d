"""Adapter for the OpenAI-compatible chat completions wire format (OpenAI, vLLM, Ollama,
llama.cpp server, DeepSeek, Qwen/DashScope …), blocking and SSE streaming."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .gateway import CUT_OFF_REASONS, ModelHTTPError, ModelResponse, ToolSpec
from .messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from .parsing import (
    ThinkFilter,
    ensure_unique_ids,
    json_complete,
    parse_arguments,
    split_reasoning,
)
from .providers import Provider, Wire

__all__ = ["OpenAIChatModel"]

log = logging.getLogger(__name__)

_STREAM_OPTIONAL = ("stream_options",)
_WIRE_CACHE_SIZE = 1024
_REASONING_KEYS = ("reasoning_content", "reasoning")


class OpenAIChatModel:
    """``openai:<model>``: chat completions at ``<OPENAI_BASE_URL>/chat/completions``."""

    scripted = False

    def __init__(
        self,
        model: str,
        provider: Provider,
        *,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.name = f"{provider.name}:{model}"
        self.provider = provider
        self.params = dict(params or {})  # e.g. temperature, max_tokens: dropped if refused
        base = provider.base_url
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self._headers = {"Accept": "application/json", **provider.headers}
        if provider.api_key:
            self._headers["Authorization"] = f"Bearer {provider.api_key}"
        self._optional = (
            *self.params,
            *_STREAM_OPTIONAL,
            "parallel_tool_calls",
            "tool_choice",
            "tools",  # a server without tool support: calls are written as text instead
        )
        self._tool_cache: dict[int, tuple[ToolSpec, dict[str, Any]]] = {}
        # A run's history is sent again with every call: each message's wire form is made
        # once (keyed by the message object, checked against its content).
        self._wire_cache: dict[int, tuple[Message, str, dict[str, Any]]] = {}

    # -- Model protocol ---------------------------------------------------------------------

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        timeout: float | None = None,
    ) -> ModelResponse:
        started = time.perf_counter()
        data = self.provider.post_json(
            self.url,
            lambda: self._payload(messages, tools, stream=False),
            self._headers,
            optional=self._optional,
            timeout=timeout,
        )
        return self._parse(data, started)

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        started = time.perf_counter()
        chunks = self.provider.stream_json(
            self.url,
            lambda: self._payload(messages, tools, stream=True),
            {**self._headers, "Accept": "text/event-stream"},
            optional=self._optional,
            timeout=timeout,
        )
        return self._assemble(chunks, on_delta, started)

    # -- request ----------------------------------------------------------------------------

    @property
    def text_tools(self) -> bool:
        """True once the server refused the ``tools`` parameter: tools are then described
        in the system prompt and calls travel as ``<tool_call>`` text (the loop's parser
        chain reads them back)."""
        return "tools" in self.provider.dropped_params

    def _payload(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, stream: bool
    ) -> dict[str, Any]:
        if tools and self.text_tools:
            wire = _text_tool_messages(messages, tools)
        else:
            wire = self._wire_messages(messages)
        payload: dict[str, Any] = {"model": self.model, "messages": wire}
        if tools and not self.text_tools:
            payload["tools"] = [self._wire_tool(t) for t in tools]
        payload.update(self.params)
        if stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    def _wire_messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """Chat messages; images that tools returned follow their results as one user
        message of ``image_url`` parts (the tool role carries text only)."""
        out: list[dict[str, Any]] = []
        with_images: list[ToolMessage] = []
        cache = self._wire_cache
        for m in messages:
            if with_images and not isinstance(m, ToolMessage):
                out.append(_tool_images_message(with_images))
                with_images = []
            hit = cache.get(id(m))
            if hit is not None and hit[0] is m and hit[1] is m.content:
                out.append(hit[2])
                continue
            wire = _wire_message(m)
            out.append(wire)
            if isinstance(m, UserMessage | ToolMessage) and m.attachments:
                if isinstance(m, ToolMessage) and any(a.data for a in m.attachments):
                    with_images.append(m)
                continue  # filled in for this call only: not kept
            if len(cache) >= _WIRE_CACHE_SIZE:
                cache.clear()
            wire = out[-1] = Wire(wire)  # sent again with every later call: text kept
            cache[id(m)] = (m, m.content, wire)
        if with_images:
            out.append(_tool_images_message(with_images))
        return out

    def _wire_tool(self, spec: ToolSpec) -> dict[str, Any]:
        hit = self._tool_cache.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        wire = Wire(
            type="function",
            function={
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        )
        if len(self._tool_cache) > 512:
            self._tool_cache.clear()
        self._tool_cache[id(spec)] = (spec, wire)
        return wire

    # -- blocking reply ---------------------------------------------------------------------

    def _parse(self, data: dict[str, Any], started: float) -> ModelResponse:
        choices = data.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        finish = choice.get("finish_reason")
        if finish == "error" or (data.get("error") and not choice.get("message")):
            err = data.get("error") or "the provider ended the reply with an error"
            raise ModelHTTPError(self.provider.name, None, _error_message(err))
        msg = choice.get("message") or {}
        if not isinstance(msg, dict):
            msg = {}
        content = _text(msg.get("content"))
        reasoning = next((msg[k] for k in _REASONING_KEYS if msg.get(k)), None)
        content, think = split_reasoning(content)
        reasoning = _join(reasoning, think)
        raw_calls = list(msg.get("tool_calls") or [])
        if not raw_calls and isinstance(msg.get("function_call"), dict):
            raw_calls = [{"function": msg["function_call"]}]
        cut: list[Any] = []
        if finish in CUT_OFF_REASONS:  # cut off at the token limit: unfinished calls never run
            cut = [tc for tc in raw_calls if not _wire_call_complete(tc)]
            raw_calls = [tc for tc in raw_calls if _wire_call_complete(tc)]
        calls = _calls_from_wire(raw_calls)
        return ModelResponse(
            AssistantMessage(content=content.strip(), tool_calls=calls, reasoning=reasoning),
            _usage(data.get("usage")),
            str(data.get("model") or self.model),
            (time.perf_counter() - started) * 1000,
            finish,
            _calls_from_wire(cut, keep_nameless=True),
        )

    # -- streamed reply ---------------------------------------------------------------------

    def _assemble(
        self,
        chunks: Iterable[dict[str, Any]],
        on_delta: Callable[[str], None] | None,
        started: float,
    ) -> ModelResponse:
        think = ThinkFilter()
        parts: list[str] = []
        reasoning: list[str] = []
        acc = _CallAccumulator()
        usage = Usage()
        finish: str | None = None
        model = self.model
        seen = 0
        for chunk in chunks:
            seen += 1
            if chunk.get("error"):  # mid-stream error (OpenRouter also sends it with choices)
                raise ModelHTTPError(self.provider.name, None, _error_message(chunk["error"]))
            if chunk.get("usage"):
                usage = _usage(chunk["usage"])
            if chunk.get("model"):
                model = str(chunk["model"])
            for choice in chunk.get("choices") or ():
                if choice.get("index") not in (0, None):
                    continue  # only the first choice is the reply
                delta = choice.get("delta") or choice.get("message") or {}
                for key in _REASONING_KEYS:
                    if delta.get(key):
                        reasoning.append(str(delta[key]))
                text = _text(delta.get("content"))
                if text:
                    visible = think.feed(text)
                    if visible:
                        parts.append(visible)
                        if on_delta is not None:
                            on_delta(visible)
                for tc in delta.get("tool_calls") or ():
                    acc.add(tc)
                if isinstance(delta.get("function_call"), dict):
                    acc.add({"function": delta["function_call"]})
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
                    if finish == "error":
                        raise ModelHTTPError(
                            self.provider.name, None, "the provider ended the stream with an error"
                        )
        if seen == 0:
            raise ModelHTTPError(self.provider.name, None, "stream ended without any data")
        if finish is None and not acc.all_complete():
            # the connection closed inside a call: what arrived is not the whole call
            raise ModelHTTPError(
                self.provider.name, None, "stream ended inside a tool call; nothing was run"
            )
        tail = think.flush()
        if tail:
            parts.append(tail)
            if on_delta is not None:
                on_delta(tail)
        calls, cut = acc.calls(cut_off=finish in CUT_OFF_REASONS)
        message = AssistantMessage(
            content="".join(parts).strip(),
            tool_calls=calls,
            reasoning=_join("".join(reasoning) or None, think.reasoning),
        )
        latency = (time.perf_counter() - started) * 1000
        return ModelResponse(message, usage, model, latency, finish, cut)


class _PartialCall:
    __slots__ = ("args_obj", "id", "name", "parts")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.parts: list[str] = []
        self.args_obj: dict[str, Any] | None = None

    def complete(self) -> bool:
        if self.args_obj is not None:
            return True
        return json_complete("".join(self.parts))


class _CallAccumulator:
    """Joins tool-call fragments of a stream, coping with deltas without ``index``, one
    index shared by parallel calls, and a fresh id on every fragment."""

    def __init__(self) -> None:
        self._calls: list[_PartialCall] = []
        self._by_index: dict[Any, _PartialCall] = {}

    def add(self, tc: dict[str, Any]) -> None:
        fn: dict[str, Any] = tc["function"] if isinstance(tc.get("function"), dict) else {}
        name = fn.get("name") or tc.get("name")
        args = fn.get("arguments", tc.get("arguments"))
        index = tc.get("index")
        target = self._by_index.get(index) if index is not None else None
        if target is None and index is None and self._calls:
            target = self._calls[-1]
        starts_new = target is None or (
            bool(name)
            and target.name is not None
            and (
                name != target.name
                or target.complete()
                or bool(tc.get("id") and target.id and tc["id"] != target.id)  # no-arg calls
            )
        )
        if starts_new:
            target = _PartialCall()
            self._calls.append(target)
            if index is not None:
                self._by_index[index] = target
        assert target is not None
        if name and target.name is None:
            target.name = str(name)
        if tc.get("id") and target.id is None:
            target.id = str(tc["id"])
        if isinstance(args, dict):
            target.args_obj = args
        elif args:
            target.parts.append(str(args))

    def all_complete(self) -> bool:
        return all(p.complete() or not (p.name or p.parts) for p in self._calls)

    def calls(self, *, cut_off: bool = False) -> tuple[list[ToolCall], list[ToolCall]]:
        """(calls, incomplete calls): when the reply was ``cut_off`` at the token limit,
        a call whose arguments are not a whole JSON value is incomplete."""
        out: list[ToolCall] = []
        cut: list[ToolCall] = []
        for p in self._calls:
            incomplete = cut_off and not p.complete()
            if not p.name and not incomplete:
                log.warning("dropping a streamed tool call without a name")
                continue
            raw = "".join(p.parts)
            parsed = parse_arguments(p.args_obj if p.args_obj is not None else raw)
            if incomplete:
                cut.append(ToolCall(id=p.id or "", name=p.name or "", raw_arguments=raw))
                continue
            out.append(
                ToolCall(
                    id=p.id or "",
                    name=p.name,
                    arguments=parsed.arguments,
                    raw_arguments=parsed.raw,
                )
            )
        return ensure_unique_ids(out), cut


def _wire_call_complete(tc: Any) -> bool:
    if not isinstance(tc, dict):
        return True
    fn: dict[str, Any] = tc["function"] if isinstance(tc.get("function"), dict) else tc
    args = fn.get("arguments")
    return isinstance(args, dict) or (isinstance(args, str) and json_complete(args))


def _calls_from_wire(raw_calls: Iterable[Any], *, keep_nameless: bool = False) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for tc in raw_calls:
        if not isinstance(tc, dict):
            continue
        fn: dict[str, Any] = tc["function"] if isinstance(tc.get("function"), dict) else tc
        name = fn.get("name")
        if not name and not keep_nameless:
            log.warning("dropping a tool call without a name: %.200r", tc)
            continue
        parsed = parse_arguments(fn.get("arguments"))
        calls.append(
            ToolCall(
                id=str(tc.get("id") or ""),
                name=str(name or ""),
                arguments=parsed.arguments,
                raw_arguments=parsed.raw,
            )
        )
    return ensure_unique_ids(calls)


def _tool_images_message(results: Sequence[ToolMessage]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for m in results:
        images = [a for a in m.attachments if a.data]
        label = "image" if len(images) == 1 else f"{len(images)} images"
        parts.append({"type": "text", "text": f"The {m.name} call {m.call_id} returned {label}:"})
        for a in images:
            url = f"data:{a.media_type};base64,{a.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": parts}


def _wire_message(m: Message) -> dict[str, Any]:
    if isinstance(m, UserMessage):
        if not m.attachments:
            return {"role": "user", "content": m.content}
        content: list[dict[str, Any]] = [{"type": "text", "text": m.content}]
        for a in m.attachments:
            url = f"data:{a.media_type};base64,{a.data}"
            content.append({"type": "image_url", "image_url": {"url": url}})
        return {"role": "user", "content": content}
    if isinstance(m, AssistantMessage):
        out: dict[str, Any] = {"role": "assistant", "content": m.content or None}
        if m.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in m.tool_calls
            ]
        elif not m.content:
            out["content"] = ""
        return out
    if isinstance(m, ToolMessage):
        return {"role": "tool", "tool_call_id": m.call_id, "content": m.content}
    if isinstance(m, SystemMessage):
        return {"role": "system", "content": m.content}
    raise TypeError(f"unknown message {m!r}")


_TEXT_TOOLS_PROMPT = """\

# Tools
You can call these tools. Each is given as a JSON schema of its arguments:
{tools}

To call a tool, reply with one line per call, exactly in this form:
<tool_call>{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}</tool_call>
Results come back in <tool_response> blocks. When you have the answer, reply without
any <tool_call>."""


def _text_tool_messages(
    messages: Sequence[Message], tools: Sequence[ToolSpec]
) -> list[dict[str, Any]]:
    """Messages for a server without native tool calls: tools in the system prompt, calls
    and results as text (Hermes-style tags)."""
    listing = "\n".join(
        json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters})
        for t in tools
    )
    prompt = _TEXT_TOOLS_PROMPT.format(tools=listing)
    out: list[dict[str, Any]] = []
    has_system = False
    for m in messages:
        if isinstance(m, SystemMessage) and not has_system:
            out.append({"role": "system", "content": m.content + "\n" + prompt})
            has_system = True
        elif isinstance(m, AssistantMessage) and m.tool_calls:
            calls = "\n".join(
                "<tool_call>"
                + json.dumps({"name": c.name, "arguments": c.arguments})
                + "</tool_call>"
                for c in m.tool_calls
            )
            text = f"{m.content}\n{calls}" if m.content else calls
            out.append({"role": "assistant", "content": text})
        elif isinstance(m, ToolMessage):
            body = f'<tool_response name="{m.name}">\n{m.content}\n</tool_response>'
            if out and out[-1]["role"] == "user" and out[-1].get("_results"):
                out[-1]["content"] += "\n" + body
            else:
                out.append({"role": "user", "content": body, "_results": True, "_images": []})
            if any(a.data for a in m.attachments):
                out[-1]["_images"].append(m)
        else:
            out.append(_wire_message(m))
    if not has_system:
        out.insert(0, {"role": "system", "content": prompt.strip()})
    for item in out:
        item.pop("_results", None)
        images = item.pop("_images", None)
        if images:
            parts = _tool_images_message(images)["content"]
            item["content"] = [{"type": "text", "text": item["content"]}, *parts]
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") != "image_url"
        )
    return str(content)


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or raw.get("output_tokens") or 0),
    )


def _join(a: str | None, b: str | None) -> str | None:
    if a and b:
        return f"{a}\n\n{b}"
    return a or b or None


def _error_message(err: Any) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)
    return str(err)
