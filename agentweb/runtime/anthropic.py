"""Adapter for the Anthropic Messages wire format (tool_use / tool_result blocks),
blocking and streaming."""

from __future__ import annotations

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
)
from .parsing import (
    ThinkFilter,
    ensure_unique_ids,
    json_complete,
    parse_arguments,
    split_reasoning,
)
from .providers import Provider

__all__ = ["AnthropicModel"]

log = logging.getLogger(__name__)

API_VERSION = "2023-06-01"


class AnthropicModel:
    """``anthropic:<model>``: the Messages API at ``<ANTHROPIC_BASE_URL>/v1/messages``."""

    scripted = False

    def __init__(
        self,
        model: str,
        provider: Provider,
        *,
        max_tokens: int = 4096,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.name = f"{provider.name}:{model}"
        self.provider = provider
        self.max_tokens = max_tokens
        self.params = dict(params or {})
        base = provider.base_url
        if base.endswith("/v1/messages"):
            self.url = base
        elif base.endswith("/v1"):
            self.url = base + "/messages"
        else:
            self.url = base + "/v1/messages"
        self._headers = {"anthropic-version": API_VERSION, **provider.headers}
        if provider.api_key:
            self._headers["x-api-key"] = provider.api_key
        self._optional = tuple(self.params)

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
            self._payload(messages, tools, stream=False),
            self._headers,
            optional=self._optional,
            timeout=timeout,
        )
        if data.get("type") == "error":
            raise ModelHTTPError(self.provider.name, None, _error_message(data.get("error")))
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[ToolCall] = []
        cut: list[ToolCall] = []
        blocks = [b for b in data.get("content") or () if isinstance(b, dict)]
        stop = data.get("stop_reason")
        for i, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text") or ""))
            elif kind == "thinking":
                thinking.append(str(block.get("thinking") or ""))
            elif kind == "tool_use":
                call = _tool_call(block.get("id"), block.get("name"), block.get("input"))
                if stop in CUT_OFF_REASONS and i == len(blocks) - 1:
                    cut.append(call)  # the reply ended inside this call: its input is partial
                else:
                    calls.append(call)
        content, think = split_reasoning("".join(texts))
        message = AssistantMessage(
            content=content.strip(),
            tool_calls=ensure_unique_ids(calls),
            reasoning=_join("\n\n".join(t for t in thinking if t) or None, think),
        )
        return ModelResponse(
            message,
            _usage(data.get("usage")),
            str(data.get("model") or self.model),
            (time.perf_counter() - started) * 1000,
            stop,
            cut,
        )

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        started = time.perf_counter()
        events = self.provider.stream_json(
            self.url,
            self._payload(messages, tools, stream=True),
            {**self._headers, "Accept": "text/event-stream"},
            optional=self._optional,
            timeout=timeout,
        )
        return self._assemble(events, on_delta, started)

    # -- request ----------------------------------------------------------------------------

    def _payload(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, stream: bool
    ) -> dict[str, Any]:
        system = "\n\n".join(m.content for m in messages if isinstance(m, SystemMessage))
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": _wire_messages(messages),
        }
        if system:
            payload["system"] = system
        if tools:
            payload["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        payload.update(self.params)
        if stream:
            payload["stream"] = True
        return payload

    # -- streamed reply ---------------------------------------------------------------------

    def _assemble(
        self,
        events: Iterable[dict[str, Any]],
        on_delta: Callable[[str], None] | None,
        started: float,
    ) -> ModelResponse:
        think = ThinkFilter()
        parts: list[str] = []
        thinking: list[str] = []
        blocks: dict[int, dict[str, Any]] = {}
        order: list[int] = []
        input_tokens = output_tokens = 0
        stop: str | None = None
        model = self.model
        seen = 0
        for event in events:
            seen += 1
            kind = event.get("type")
            if kind == "error" or (event.get("error") and kind is None):
                raise ModelHTTPError(self.provider.name, None, _error_message(event.get("error")))
            if kind == "message_start":
                msg = event.get("message") or {}
                model = str(msg.get("model") or model)
                usage = _usage(msg.get("usage"))
                input_tokens, output_tokens = usage.input_tokens, usage.output_tokens
            elif kind == "content_block_start":
                idx = int(event.get("index", len(order)))
                block = dict(event.get("content_block") or {})
                block["_parts"] = []
                blocks[idx] = block
                order.append(idx)
                if block.get("type") == "text" and block.get("text"):
                    self._emit(think, str(block["text"]), parts, on_delta)
            elif kind == "content_block_stop":
                idx = int(event.get("index", order[-1] if order else 0))
                if idx in blocks:
                    blocks[idx]["_stopped"] = True
            elif kind == "content_block_delta":
                idx = int(event.get("index", order[-1] if order else 0))
                delta = event.get("delta") or {}
                dkind = delta.get("type")
                if dkind == "text_delta":
                    self._emit(think, str(delta.get("text") or ""), parts, on_delta)
                elif dkind == "input_json_delta":
                    block = blocks.setdefault(idx, {"type": "tool_use", "_parts": []})
                    block["_parts"].append(str(delta.get("partial_json") or ""))
                elif dkind == "thinking_delta":
                    thinking.append(str(delta.get("thinking") or ""))
            elif kind == "message_delta":
                stop = (event.get("delta") or {}).get("stop_reason") or stop
                raw_usage = event.get("usage") or {}
                output_tokens = int(raw_usage.get("output_tokens") or output_tokens)
                input_tokens = int(raw_usage.get("input_tokens") or input_tokens)
        if seen == 0:
            raise ModelHTTPError(self.provider.name, None, "stream ended without any data")
        tail = think.flush()
        if tail:
            parts.append(tail)
            if on_delta is not None:
                on_delta(tail)
        uses = [b for b in (blocks[i] for i in order if i in blocks) if b.get("type") == "tool_use"]
        unfinished = stop is None or not all(b.get("_stopped") for b in uses)
        if uses and unfinished and stop not in CUT_OFF_REASONS:
            # the connection closed inside a call: what arrived is not the whole call
            raise ModelHTTPError(
                self.provider.name, None, "stream ended inside a tool call; nothing was run"
            )
        calls: list[ToolCall] = []
        cut: list[ToolCall] = []
        for n, b in enumerate(uses):
            text = "".join(b["_parts"])
            call = _tool_call(b.get("id"), b.get("name"), text or b.get("input"))
            if stop in CUT_OFF_REASONS and not json_complete(text) and (text or n == len(uses) - 1):
                cut.append(call.model_copy(update={"arguments": {}, "raw_arguments": text}))
            elif call.name:
                calls.append(call)
        message = AssistantMessage(
            content="".join(parts).strip(),
            tool_calls=ensure_unique_ids(calls),
            reasoning=_join("".join(thinking) or None, think.reasoning),
        )
        usage_total = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
        latency = (time.perf_counter() - started) * 1000
        return ModelResponse(message, usage_total, model, latency, stop, cut)

    @staticmethod
    def _emit(
        think: ThinkFilter,
        text: str,
        parts: list[str],
        on_delta: Callable[[str], None] | None,
    ) -> None:
        visible = think.feed(text)
        if visible:
            parts.append(visible)
            if on_delta is not None:
                on_delta(visible)


def _tool_call(call_id: Any, name: Any, raw_input: Any) -> ToolCall:
    parsed = parse_arguments(raw_input)
    return ToolCall(
        id=str(call_id or ""),
        name=str(name or ""),
        arguments=parsed.arguments,
        raw_arguments=parsed.raw,
    )


def _wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            continue
        if isinstance(m, AssistantMessage):
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls:
                blocks.append(
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                )
            if not blocks:
                blocks.append({"type": "text", "text": "(no reply)"})
            out.append({"role": "assistant", "content": blocks})
            continue
        if isinstance(m, ToolMessage):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.call_id,
                "content": m.content,
            }
            images = [a for a in m.attachments if a.data]
            if images:  # image blocks inside the tool_result, after its text
                block["content"] = [{"type": "text", "text": m.content or "(no text)"}] + [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": a.media_type, "data": a.data},
                    }
                    for a in images
                ]
            if m.is_error:
                block["is_error"] = True
            user_blocks = [block]
        else:
            user_blocks = [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": a.media_type, "data": a.data},
                }
                for a in m.attachments
            ]
            user_blocks.append({"type": "text", "text": m.content})
        if out and out[-1]["role"] == "user":  # tool results and text share one user turn
            out[-1]["content"].extend(user_blocks)
        else:
            out.append({"role": "user", "content": user_blocks})
    return out


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    cached = int(raw.get("cache_read_input_tokens") or 0) + int(
        raw.get("cache_creation_input_tokens") or 0
    )
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0) + cached,
        output_tokens=int(raw.get("output_tokens") or 0),
    )


def _join(a: str | None, b: str | None) -> str | None:
    if a and b:
        return f"{a}\n\n{b}"
    return a or b or None


def _error_message(err: Any) -> str:
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)
    return str(err)
