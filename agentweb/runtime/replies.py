"""Reply clean-up: what the loop makes of a model's reply before it acts on it.

Reasoning written into the text (``<think>`` blocks) is moved out of it, text and
reasoning are cut at ``max_reply_chars``, calls written out as text are read back, tool
names the provider prefixed are resolved, call ids are made unique in the run, and calls
the reply was cut off inside are marked so they never run. The text previews of a
streamed reply go through ``safe_delta``, so a failing preview never breaks a run; the
reply's ``model_called`` event is made by ``model_called``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from . import events as ev
from .gateway import ModelResponse
from .messages import AssistantMessage, ToolCall
from .parsing import ensure_unique_ids, parse_text_calls, resolve_tool_name, split_reasoning
from .state import LoopState

__all__ = ["TRUNCATED_MARK", "clean_reply", "model_called", "safe_delta"]

log = logging.getLogger(__name__)

TRUNCATED_MARK = "\n\n[…reply truncated]"
_CALL_SYNTAX = re.compile(
    r"<tool_call>|<function=|\[TOOL_CALLS\]|<\|python_tag\|>|^\s*Action\s*:", re.M
)


def clean_reply(
    state: LoopState,
    response: ModelResponse,
    tools: Mapping[str, Collection[str]],
    max_chars: int,
) -> AssistantMessage:
    """The assistant message the run keeps for ``response`` (the reply itself when
    nothing needed cleaning). Updates the state's bookkeeping of the reply: usage, the
    ids of calls seen and cut off, the best answer so far, the empty-reply count.

    ``tools`` maps the tools the agent may call to their parameter names: a name in the
    reply that is not one of them may still resolve to exactly one (``functions.get_x``
    → ``get_x``), and calls written out as text are read back with them."""
    msg = response.message
    state.usage = state.usage + response.usage
    content, reasoning = msg.content, msg.reasoning
    if "<" in content:
        content, extra = split_reasoning(content)
        if extra:
            reasoning = f"{reasoning}\n\n{extra}" if reasoning else extra
    if max_chars and len(content) > max_chars:  # bounded cost: stored, shown, sent back cut
        content = content[:max_chars] + TRUNCATED_MARK
    if max_chars and reasoning and len(reasoning) > max_chars:
        reasoning = reasoning[:max_chars] + TRUNCATED_MARK
    calls = list(msg.tool_calls)
    cut = [c for c in response.incomplete_calls if c.name]
    state.cut_off = bool(response.incomplete_calls)
    if not calls and not cut and content:
        parsed = parse_text_calls(content, tools)
        if response.cut_off and (parsed.calls or _CALL_SYNTAX.search(content)):
            cut, state.cut_off = parsed.calls, True  # cut off inside written-out calls
            content = parsed.text if parsed.calls else ""
        else:
            calls, content = parsed.calls, parsed.text
    calls = [c if c.name in tools else _resolved(c, tools) for c in calls]
    if cut:
        calls.extend(c.model_copy(update={"arguments": {}}) for c in cut)
    if calls:
        calls = ensure_unique_ids(calls, set(state.seen_call_ids))
        state.seen_call_ids.extend(c.id for c in calls)
    state.cut_calls = [c.id for c in calls[len(calls) - len(cut) :]] if cut else []
    if content.strip():
        state.best_answer = content
    if content.strip() or calls:
        state.empty_replies = 0
    if content is msg.content and calls == msg.tool_calls and reasoning is msg.reasoning:
        return msg
    return AssistantMessage(content=content, tool_calls=calls, reasoning=reasoning)


def _resolved(call: ToolCall, tools: Mapping[str, Collection[str]]) -> ToolCall:
    """``functions.get_x`` and kin → ``get_x`` when that is exactly one of our tools."""
    name = resolve_tool_name(call.name, tools)
    return call if name is None else call.model_copy(update={"name": name})


def safe_delta(
    on_delta: Callable[[str], None] | None, cap: int = 0
) -> Callable[[str], None] | None:
    """Text previews must not break a run: a failing ``on_delta`` is logged and not
    called again for this model call. With ``cap``, previews stop after that many
    characters (the reply is cut there)."""
    if on_delta is None:
        return None
    broken = False
    sent = 0

    def deliver(text: str) -> None:
        nonlocal broken, sent
        if broken:
            return
        if cap:
            if sent >= cap:
                return
            text = text[: cap - sent]
            sent += len(text)
        try:
            on_delta(text)
        except Exception:
            broken = True
            log.exception("on_delta failed; no more previews for this model call")

    return deliver


def model_called(
    response: ModelResponse,
    message: AssistantMessage,
    state: LoopState,
    context: dict[str, Any] | None = None,
) -> ev.ModelCalled:
    """The ``model_called`` event of a reply (``message``: what the run keeps of it)."""
    calls: list[dict[str, Any]] = [
        {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
    ]
    if response.cut_off and state.cut_calls:  # stopped at the output token limit
        cut = set(state.cut_calls)
        for c in calls:
            if c["id"] in cut:
                c["cut_off"] = True
    return ev.ModelCalled(
        model=response.model,
        latency_ms=round(response.latency_ms, 3),
        tokens={"input": response.usage.input_tokens, "output": response.usage.output_tokens},
        text=message.content,
        tool_calls=calls,
        finish_reason=response.finish_reason,
        iteration=state.iteration,
        cut_off=response.cut_off,
        truncated=message.content.endswith(TRUNCATED_MARK),
        reasoning=message.reasoning or None,
        context=context or None,
    )
