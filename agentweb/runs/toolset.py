"""The tool set of this installation, and the one answer to "how risky is this call?".

Tools come from the modules AGENTWEB_TOOLS names (with their domains' context hints and
demo model), from tool sources added while the process runs (each connected MCP
server's), and from agentweb itself (``BUILTIN_RISK``: delegation's two tools and the
context policy's ``search_tools``, which no module registers).

``risk_of(tool, profile)`` is what every part of the Django side asks (the journal, the
run's actions, the profile checks, a new run's note of earlier actions, approval cards):
the profile's override, else the tool's own risk, else ``"high"``. It fails closed: a
tool this installation does not know (its module was removed since, a typo in a
profile) or an override that is not a risk level counts as high risk. The runtime's
loop applies the same override-then-tool rule to the tools it holds.

A leaf: nothing of the application below it, so models, actions and pages import it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from django.conf import settings

from agentweb.runtime.context import ContextHints
from agentweb.runtime.gateway import Model
from agentweb.runtime.selection import SEARCH_TOOL
from agentweb.runtime.tools import RISKS, Risk, ToolRegistry, ToolSources, load_tools

#: The delegation tools' names (``delegation`` builds them for profiles with delegates).
DELEGATE = "delegate_task"
WAIT = "wait_for_tasks"

#: Tools agentweb offers itself, never from a module, and their risk: they only hand work
#: on, wait for it, or search the tool list.
BUILTIN_RISK: dict[str, Risk] = {DELEGATE: "low", WAIT: "low", SEARCH_TOOL: "low"}

#: Tools that do not come from the AGENTWEB_TOOLS modules: each connected MCP server's
#: (``agentweb.mcpservers`` adds its source when the app starts).
tool_sources = ToolSources()


@functools.cache
def module_tools() -> ToolRegistry:
    """Tools of the modules named by AGENTWEB_TOOLS, loaded once per process."""
    return load_tools(settings.AGENTWEB_TOOLS)


class _Registry:
    """``registry()``: every tool this process can offer now, the AGENTWEB_TOOLS modules'
    and the tool sources' (which change while it runs: an MCP server added or its tool
    list changed). ``registry.cache_clear()`` reloads the modules."""

    def __call__(self) -> ToolRegistry:
        return tool_sources.registry(module_tools())

    def cache_clear(self) -> None:
        module_tools.cache_clear()


registry = _Registry()


def risk_of(tool: str, profile: Any = None) -> Risk:
    """The risk of a call of ``tool`` under ``profile`` (an ``AgentProfile``, or None for
    the tool's own): the profile's ``risk_overrides`` entry, else the tool's risk, else
    ``"high"`` (fail closed: an unknown tool, or an override that is not a risk level)."""
    overrides = getattr(profile, "risk_overrides", None)
    override = overrides.get(tool) if isinstance(overrides, dict) else None
    if override is not None:
        return override if override in RISKS else "high"
    found = registry().get(tool)
    if found is not None:
        return found.risk
    return BUILTIN_RISK.get(tool, "high")


#: How a profile allows a whole family of tools (every tool of one MCP server).
FAMILY_WILDCARD = "__*"


def tool_wildcards() -> set[str]:
    """The ``<family>__*`` names a profile may allow: one per MCP server."""
    return {f"{family}{FAMILY_WILDCARD}" for family in tool_sources.families()}


def allowed_tools(profile: Any) -> list[str]:
    """The tools a profile is offered: the ones it names (``<family>__*`` standing for
    every tool of that family now); none named, every AGENTWEB_TOOLS module's tool (a
    server's tools only ever by name, so a new server reaches no profile unasked)."""
    if not profile.allowed_tools:
        return module_tools().names()
    names = registry().names()
    out: list[str] = []
    for name in profile.allowed_tools:
        if name.endswith(FAMILY_WILDCARD):
            prefix = name[: -len("*")]
            out.extend(n for n in names if n.startswith(prefix) and n not in out)
        elif name in names and name not in out:
            out.append(name)
    return out


def missing_tools(profile: Any) -> list[str]:
    """The tools ``profile`` names that this process cannot offer now (their module is not
    in AGENTWEB_TOOLS, their MCP server is gone): its page says so, and so does each of
    its runs as it starts (``run_started``'s ``missing_tools``), instead of running
    silently without them."""
    named = getattr(profile, "allowed_tools", None)
    if not isinstance(named, list):
        return []
    offered = set(registry().names()) | set(BUILTIN_RISK) | tool_wildcards()
    return [n for n in named if isinstance(n, str) and n not in offered]


def tool_modules() -> tuple[ModuleType, ...]:
    """The modules named by AGENTWEB_TOOLS (the domains of this installation)."""
    return _modules(tuple(settings.AGENTWEB_TOOLS))


@functools.cache
def _modules(paths: tuple[str, ...]) -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(p) for p in paths)


def context_hints() -> ContextHints:
    """The ``CONTEXT_HINTS`` of every loaded tool module, merged (facts, synonyms, the
    summary prompt: what the domains tell the context policy)."""
    return _hints(tuple(settings.AGENTWEB_TOOLS))


def policy_options() -> dict[str, Any]:
    """``LayeredContextPolicy`` options for the loaded domains' hints, made once per
    process (the tool scorer and its index are shared by every run)."""
    return _options(tuple(settings.AGENTWEB_TOOLS))


@functools.cache
def _options(paths: tuple[str, ...]) -> dict[str, Any]:
    return _hints(paths).options()


@functools.cache
def _hints(paths: tuple[str, ...]) -> ContextHints:
    hints = ContextHints()
    for module in _modules(paths):
        extra = getattr(module, "CONTEXT_HINTS", None)
        if isinstance(extra, ContextHints):
            hints = hints.merged(extra)
    return hints


def demo_factory() -> Callable[[], Model] | None:
    """The scripted model ``AGENTWEB_MODEL=demo`` plays: the ``demo_model()`` of the first
    loaded tool module that has one."""
    for module in tool_modules():
        factory = getattr(module, "demo_model", None)
        if callable(factory):
            return factory
    return None
