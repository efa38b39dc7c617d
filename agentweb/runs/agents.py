"""Turning an agent profile and a run into a runtime Agent (the only bridge to the engine)."""

from __future__ import annotations

import functools
import importlib
import re
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from agentweb.runtime.context import ContextHints, LayeredContextPolicy
from agentweb.runtime.gateway import ConfigError, Model
from agentweb.runtime.loop import Agent, AgentConfig
from agentweb.runtime.models import model_from_config
from agentweb.runtime.tools import ToolRegistry, ToolSources, load_tools

if TYPE_CHECKING:
    from agentweb.runs.journal import DbJournal
    from agentweb.runs.models import AgentProfile, Run

_VAR = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
_models: dict[str, Model] = {}
_models_lock = threading.Lock()


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


def model_for(spec: str) -> Model:
    """One model client per spec and process, so HTTP connections are reused."""
    with _models_lock:
        if spec not in _models:
            _models[spec] = model_from_config(spec, demo=demo_factory())
        return _models[spec]


def model_problem(spec: str) -> str | None:
    """Why a profile's model string cannot work here (provider unknown, its key variable
    unset, no demo model loaded), or None."""
    try:
        model = model_from_config(spec, demo=demo_factory())
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


def render_prompt(template: str, variables: dict[str, str]) -> str:
    """Fill ``{{name}}`` placeholders; unknown names are left visible, never guessed."""
    return _VAR.sub(lambda m: variables.get(m.group(1), m.group(0)), template)


def prompt_variables(run: Run) -> dict[str, str]:
    ticket = run.ticket
    return {
        "user": run.created_by.get_username(),
        "now": timezone.now().strftime("%Y-%m-%d %H:%M UTC"),
        "ticket": ticket.as_prompt() if ticket else "(no ticket)",
        "ticket_id": str(ticket.pk) if ticket else "",
        "customer": ticket.customer_label if ticket else "(unknown)",
        "customer_id": ticket.customer_id if ticket else "",
        "tools": ", ".join(registry().names()),
    }


#: How a profile allows a whole family of tools (every tool of one MCP server).
FAMILY_WILDCARD = "__*"


def tool_wildcards() -> set[str]:
    """The ``<family>__*`` names a profile may allow: one per MCP server."""
    return {f"{family}{FAMILY_WILDCARD}" for family in tool_sources.families()}


def allowed_tools(profile: AgentProfile) -> list[str]:
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


def build_agent(run: Run, journal: DbJournal | None = None) -> Agent:
    profile = run.agent
    spec = run.model or settings.AGENTWEB_MODEL
    model = model_for(spec)
    # What each model call sees: system prompt, pinned facts, summary, working window and
    # the tools the profile's tool_selection asks for ("all": exactly the allowed tools;
    # N: the N most relevant plus search_tools), within the profile's token budget. The
    # domains' hints say what a fact is and which words mean which tools.
    policy = LayeredContextPolicy.for_model(
        model,
        profile.context_budget_tokens,
        spec=spec,
        # a scripted model plays fixed scenarios: it always sees every allowed tool
        top_n=None if getattr(model, "scripted", False) else profile.top_n,
        **policy_options(),
    )
    tools = policy.with_search_tool(registry().subset(allowed_tools(profile)))
    from agentweb.runs.delegation import tools_for

    delegation_tools = tools_for(profile)  # delegate_task, wait_for_tasks
    if delegation_tools:
        tools = ToolRegistry([*tools, *delegation_tools])
    config = AgentConfig(
        system_prompt=render_prompt(profile.system_prompt, prompt_variables(run)),
        max_iterations=profile.max_iterations,
        allowed_tools=tools.names(),
        risk_overrides=dict(profile.risk_overrides or {}),
        stream=settings.AGENTWEB_STREAM,
        max_reply_chars=settings.AGENTWEB_MAX_REPLY_CHARS,
        vision=profile.vision,
        # The profile's approval rules wrap the tools' own (runtime.approvals); totals
        # of earlier calls come from the journal and the approvals (runs.policies).
        approval_policies=dict(profile.approval_policies or {}),
        model_deadline=float(settings.AGENTWEB_MODEL_DEADLINE_SECONDS),
    )
    # Completion validator: only the one the profile names (none by default).
    validator = load_validator(profile.validator) if profile.validator else None
    from agentweb.runs.images import DbImageStore
    from agentweb.runs.policies import prior_total

    return Agent(
        model=model,
        tools=tools,
        config=config,
        validator=validator,
        validator_name=profile.validator or None,
        journal=journal,
        context_policy=policy,
        image_store=DbImageStore(run),
        prior_total=prior_total,
    )


def run_context(run: Run) -> dict[str, Any]:
    """What a run's tools and validator read: ``subject`` (the ticket's id in the ticket
    domain) and when the run was created (``started_at``, ISO)."""
    return {
        "run_id": str(run.pk),
        "user": run.created_by.get_username(),
        "subject": str(run.ticket_id) if run.ticket_id else None,
        "started_at": run.created_at.isoformat(),
    }
