"""What an installation's agent profiles name besides tools: model clients (one per spec
and process) and completion validators, and why a profile's model or validator cannot
work here. The tool set is ``toolset``'s (its names are known here too); turning a
profile and a run into a runtime Agent is ``wiring``'s."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

from agentweb.runs import toolset
from agentweb.runtime.gateway import ConfigError, Model
from agentweb.runtime.models import model_from_config

# The tool set's names, for callers that know them from here.
registry = toolset.registry
tool_sources = toolset.tool_sources
module_tools = toolset.module_tools
tool_modules = toolset.tool_modules
tool_wildcards = toolset.tool_wildcards

_models: dict[str, Model] = {}
_models_lock = threading.Lock()


def model_for(spec: str) -> Model:
    """One model client per spec and process, so HTTP connections are reused."""
    with _models_lock:
        if spec not in _models:
            _models[spec] = model_from_config(spec, demo=toolset.demo_factory())
        return _models[spec]


def model_problem(spec: str) -> str | None:
    """Why a profile's model string cannot work here (provider unknown, its key variable
    unset, no demo model loaded), or None."""
    try:
        model = model_from_config(spec, demo=toolset.demo_factory())
    except ConfigError as exc:
        return str(exc).removeprefix("AGENTWEB_MODEL: ")
    close = getattr(getattr(model, "provider", None), "close", None)
    if callable(close):
        close()
    return None


@functools.lru_cache(maxsize=64)
def load_validator(path: str) -> Callable[[str, Any], str | None]:
    """The completion validator a profile names: ``validator(answer, state)`` returns
    None to accept the answer or a reason that goes back to the model."""
    found = import_string(path)
    if not callable(found):
        raise TypeError(f"{path} is not callable")
    return found


def validator_problem(path: str) -> str | None:
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+", path):
        return f"{path!r} is not a dotted path (module.function)"
    try:
        load_validator(path)
    except (ImportError, TypeError) as exc:
        return f"cannot use {path}: {exc}"
    return None
