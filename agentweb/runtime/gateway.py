"""The provider-neutral model gateway: what the loop needs from any model.

Wire formats live in ``openai.py`` / ``anthropic.py`` (adapters); base URL, key, HTTP
client, timeouts and retries live in ``providers.py`` (settings + transport).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .messages import AssistantMessage, Message, ToolCall, Usage

__all__ = [
    "CUT_OFF_REASONS",
    "ConfigError",
    "Model",
    "ModelAuthError",
    "ModelError",
    "ModelHTTPError",
    "ModelResponse",
    "ModelTimeout",
    "ToolSpec",
    "model_from_config",
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


_SPEC_HELP = "expected demo | openai:<model> | anthropic:<model>"


def model_from_config(
    spec: str,
    env: Mapping[str, str] | None = None,
    *,
    demo: Callable[[], Model] | None = None,
) -> Model:
    """Build a model from ``AGENTWEB_MODEL``-style ``spec`` and provider variables in ``env``.

    ``demo`` makes the scripted model that ``spec == "demo"`` names: the runtime has none
    of its own, each domain brings one (the application finds it in the tool modules)."""
    env = os.environ if env is None else env
    spec = (spec or "").strip()
    if spec == "demo":
        if demo is None:
            raise ConfigError(
                "AGENTWEB_MODEL: 'demo' needs a scripted model, and none of the loaded tool "
                "modules provides one (a module-level demo_model() function)"
            )
        return demo()
    kind, _, model_name = spec.partition(":")
    model_name = model_name.strip()
    if kind not in ("openai", "anthropic") or not model_name:
        raise ConfigError(f"AGENTWEB_MODEL: bad model spec {spec!r}; {_SPEC_HELP}")
    from .providers import provider_from_env

    provider = provider_from_env(kind, env)
    if kind == "openai":
        from .openai import OpenAIChatModel

        return OpenAIChatModel(model_name, provider)
    from .anthropic import AnthropicModel

    return AnthropicModel(model_name, provider)
