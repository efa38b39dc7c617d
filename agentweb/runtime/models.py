"""The model an ``AGENTWEB_MODEL``-style spec names: ``demo`` | ``openai:<model>`` |
``anthropic:<model>``, with the provider's settings read from the environment."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from .anthropic import AnthropicModel
from .gateway import ConfigError, Model
from .openai import OpenAIChatModel
from .providers import provider_from_env

__all__ = ["model_from_config"]

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
    provider = provider_from_env(kind, env)
    if kind == "openai":
        return OpenAIChatModel(model_name, provider)
    return AnthropicModel(model_name, provider)
