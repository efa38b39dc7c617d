"""A scripted model for tests and offline use: enqueue replies, then ``assert_complete``.

model = ScriptedModel()
model.enqueue(call("lookup", key="A1"), "Found it.")
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .gateway import ModelResponse, StreamsAfterComplete, ToolSpec
from .messages import AssistantMessage, Message, ToolCall, Usage
from .parsing import new_call_id

__all__ = ["ScriptedModel", "ScriptedRequest", "call"]

Reply = (
    str
    | AssistantMessage
    | ModelResponse
    | ToolCall
    | list[ToolCall]
    | BaseException
    | Callable[[Sequence[Message], Sequence[ToolSpec]], Any]
)


def call(name: str, arguments: dict[str, Any] | None = None, /, **kwargs: Any) -> ToolCall:
    """A tool call reply: ``call("lookup", key="A1")``."""
    return ToolCall(id=new_call_id(), name=name, arguments={**(arguments or {}), **kwargs})


@dataclass(frozen=True, slots=True)
class ScriptedRequest:
    messages: list[Message]
    tools: list[ToolSpec]
    streamed: bool


class ScriptedModel(StreamsAfterComplete):
    """Replays enqueued replies in order. A reply is answer text, a ``ToolCall`` or a list
    of them, an ``AssistantMessage``, a full ``ModelResponse``, an exception to raise, or
    a callable ``(messages, tools) -> reply`` for replies that depend on the request."""

    scripted = True

    def __init__(self, replies: Iterable[Reply] = (), *, name: str = "scripted") -> None:
        self.name = name
        self._queue: deque[Reply] = deque(replies)
        self._lock = threading.Lock()
        self.requests: list[ScriptedRequest] = []

    def enqueue(self, *replies: Reply) -> ScriptedModel:
        with self._lock:
            self._queue.extend(replies)
        return self

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def assert_complete(self) -> None:
        """Fail when enqueued replies were never asked for."""
        if self._queue:
            raise AssertionError(
                f"ScriptedModel {self.name!r}: {len(self._queue)} enqueued repl"
                f"{'y was' if len(self._queue) == 1 else 'ies were'} never used"
            )

    def _reply(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        timeout: float | None,
        streamed: bool,
    ) -> ModelResponse:
        started = time.perf_counter()
        with self._lock:
            n = len(self.requests) + 1
            self.requests.append(ScriptedRequest(list(messages), list(tools), streamed))
            if not self._queue:
                raise AssertionError(f"ScriptedModel {self.name!r}: no reply enqueued for call {n}")
            reply = self._queue.popleft()
        if callable(reply) and not isinstance(reply, BaseException):
            reply = reply(messages, tools)
        if isinstance(reply, BaseException):
            raise reply
        return self._response(reply, started)

    def _response(self, reply: Any, started: float) -> ModelResponse:
        if isinstance(reply, ModelResponse):
            return reply
        if isinstance(reply, str):
            message = AssistantMessage(content=reply)
        elif isinstance(reply, ToolCall):
            message = AssistantMessage(tool_calls=[reply])
        elif isinstance(reply, list):
            message = AssistantMessage(tool_calls=list(reply))
        elif isinstance(reply, AssistantMessage):
            message = reply
        else:
            raise TypeError(f"ScriptedModel: cannot reply with {reply!r}")
        finish = "tool_calls" if message.tool_calls else "stop"
        usage = Usage(input_tokens=0, output_tokens=len(message.content) // 4)
        latency = (time.perf_counter() - started) * 1000
        return ModelResponse(message, usage, self.name, latency, finish)
