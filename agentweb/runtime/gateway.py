"""The provider-neutral model gateway: what the loop needs from any model.

Wire formats live in ``openai.py`` / ``anthropic.py`` (adapters); base URL, key, HTTP
client, timeouts and retries live in ``providers.py`` (settings + transport); the model an
``AGENTWEB_MODEL`` spec names is built in ``models.py``. This module imports none of
them: they all build on it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .messages import AssistantMessage, Message, ToolCall, Usage

__all__ = [
    "CUT_OFF_REASONS",
    "CallGuard",
    "ConfigError",
    "Model",
    "ModelAuthError",
    "ModelCancelled",
    "ModelError",
    "ModelHTTPError",
    "ModelResponse",
    "ModelTimeout",
    "StreamsAfterComplete",
    "ToolSpec",
    "current_guard",
    "guarded_call",
]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is offered: a name, a description and a JSON schema of the arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ModelResponse:
    message: AssistantMessage
    usage: Usage
    model: str
    latency_ms: float
    finish_reason: str | None = None
    # Calls the reply was cut off inside (output token limit): not in ``message``, never run.
    incomplete_calls: list[ToolCall] = field(default_factory=list)

    @property
    def cut_off(self) -> bool:
        """The provider stopped the reply at its output token limit."""
        return self.finish_reason in CUT_OFF_REASONS


CUT_OFF_REASONS = frozenset({"length", "max_tokens", "model_length", "max_output_tokens"})


class ModelError(Exception):
    """Any failure to get a reply from a model."""


class ModelAuthError(ModelError):
    """The provider refused the credentials; the message names the provider."""

    def __init__(self, provider: str, status: int, detail: str = "") -> None:
        self.provider = provider
        self.status = status
        msg = f"{provider}: authentication failed (HTTP {status}); check the API key"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class ModelTimeout(ModelError):
    """The provider did not connect or answer within the timeout."""


class ModelCancelled(ModelError):
    """The caller gave up on the call (its run was cancelled); the connection is closed."""


class ModelHTTPError(ModelError):
    """The provider answered with an error (after retries, when retryable)."""

    def __init__(self, provider: str, status: int | None, detail: str) -> None:
        self.provider = provider
        self.status = status
        self.detail = detail
        where = f"HTTP {status}" if status is not None else "stream error"
        super().__init__(f"{provider}: {where}: {detail}")


class ConfigError(ValueError):
    """Bad model configuration; the message names the environment variable."""


# -- cancellation and the overall deadline of a model call ---------------------------------


@dataclass(slots=True)
class CallGuard:
    """What may end a model call early: a cancel flag and an overall deadline.

    The HTTP transport (``providers.py``) checks it while it waits for bytes, at least
    every ``poll`` seconds, and closes the connection when it fires; a model without
    HTTP is checked by the loop before and after the call."""

    cancel: Callable[[], bool] | None = None
    deadline: float | None = None  # time.monotonic() by which the whole reply must be in
    seconds: float | None = None
    poll: float = 0.25

    def check(self) -> None:
        if self.cancel is not None and self.cancel():
            raise ModelCancelled("the model call was cancelled")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise ModelTimeout(f"no complete reply within the deadline of {self.seconds:g} s")

    def wait(self, limit: float | None) -> float:
        """How long to block before checking again, at most ``limit``."""
        wait = self.poll
        if self.deadline is not None:
            wait = min(wait, max(0.001, self.deadline - time.monotonic()))
        if limit is not None:
            wait = min(wait, max(0.001, limit))
        return wait

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.check()
            time.sleep(self.wait(left))
        self.check()


_guard: contextvars.ContextVar[CallGuard | None] = contextvars.ContextVar(
    "agentweb_model_call_guard", default=None
)


def current_guard() -> CallGuard | None:
    return _guard.get()


def guarded_call(
    cancel: Callable[[], bool] | None = None, deadline: float | None = None
) -> _Guarded:
    """Model calls made inside ``with guarded_call(...) as guard:`` end with
    ``ModelCancelled`` once ``cancel()`` is true and with ``ModelTimeout`` after
    ``deadline`` seconds in all (retries included)."""
    guard = CallGuard(
        cancel=cancel,
        deadline=None if deadline is None else time.monotonic() + deadline,
        seconds=deadline,
    )
    return _Guarded(guard)


class _Guarded:
    """The context of one guarded call (a class: a generator-based context manager costs
    a model call a few microseconds more)."""

    __slots__ = ("guard", "token")

    def __init__(self, guard: CallGuard) -> None:
        self.guard = guard

    def __enter__(self) -> CallGuard:
        self.token = _guard.set(self.guard)
        return self.guard

    def __exit__(self, *exc: object) -> None:
        _guard.reset(self.token)


@runtime_checkable
class Model(Protocol):
    name: str
    scripted: bool

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        timeout: float | None = None,
    ) -> ModelResponse: ...

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> ModelResponse: ...


class StreamsAfterComplete:
    """Base for models whose whole reply is known at once (scripted and demo models):
    ``stream()`` is ``complete()``, then the reply's text handed to ``on_delta`` in the
    pieces ``delta_pieces`` cuts. Subclasses implement ``_reply``."""

    def _reply(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        timeout: float | None,
        streamed: bool,
    ) -> ModelResponse:
        raise NotImplementedError

    def delta_pieces(self, text: str) -> list[str]:
        return [text[i : i + 16] for i in range(0, len(text), 16)]

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        timeout: float | None = None,
    ) -> ModelResponse:
        return self._reply(messages, tools, timeout=timeout, streamed=False)

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        on_delta: Callable[[str], None] | None = None,
        timeout: float | None = None,
    ) -> ModelResponse:
        response = self._reply(messages, tools, timeout=timeout, streamed=True)
        text = response.message.content
        if on_delta is not None and text:
            for piece in self.delta_pieces(text):
                on_delta(piece)
        return response
