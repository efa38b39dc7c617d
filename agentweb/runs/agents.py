"""Turning an agent profile and a run into a runtime Agent (the only bridge to the engine)."""

from __future__ import annotations

import copy
import functools
import json
import re
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from agentweb.runtime.context import LayeredContextPolicy
from agentweb.runtime.gateway import Model, model_from_config
from agentweb.runtime.loop import Agent, AgentConfig
from agentweb.runtime.tools import ToolRegistry, load_tools

if TYPE_CHECKING:
    from agentweb.runs.journal import DbJournal
    from agentweb.runs.models import AgentProfile, Run

_VAR = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
_models: dict[str, Model] = {}
_models_lock = threading.Lock()


@functools.cache
def registry() -> ToolRegistry:
    """Tools of the modules named by AGENTWEB_TOOLS, loaded once per process."""
    return load_tools(settings.AGENTWEB_TOOLS)


def model_for(spec: str) -> Model:
    """One model client per spec and process, so HTTP connections are reused."""
    with _models_lock:
        if spec not in _models:
            _models[spec] = model_from_config(spec)
        return _models[spec]


def render_prompt(template: str, variables: dict[str, str]) -> str:
    """Fill ``{{name}}`` placeholders; unknown names are left visible, never guessed."""
    return _VAR.sub(lambda m: variables.get(m.group(1), m.group(0)), template)


def prompt_variables(run: Run) -> dict[str, str]:
    ticket = run.ticket
    customer = ticket.customer if ticket else None
    return {
        "user": run.created_by.get_username(),
        "now": timezone.now().strftime("%Y-%m-%d %H:%M UTC"),
        "ticket": (
            f"#{ticket.pk} from {customer.name} ({customer.code}): {ticket.subject}\n{ticket.body}"
            if ticket and customer
            else "(no ticket)"
        ),
        "ticket_id": str(ticket.pk) if ticket else "",
        "customer": f"{customer.name} ({customer.code})" if customer else "(unknown)",
        "customer_id": customer.code if customer else "",
        "tools": ", ".join(registry().names()),
    }


def allowed_tools(profile: AgentProfile) -> list[str]:
    names = registry().names()
    if not profile.allowed_tools:
        return list(names)
    return [name for name in profile.allowed_tools if name in names]


def _policy_predicate(rule: Any) -> Any:
    """A profile's approval rule for one tool as a predicate over the arguments."""
    if rule is None or rule == "default":
        return None
    if rule == "always":
        return lambda args: True
    if rule == "never":
        return lambda args: False
    if isinstance(rule, dict) and "argument" in rule and "at_least" in rule:
        name, limit = rule["argument"], float(rule["at_least"])

        def needs(args: dict[str, Any]) -> bool:
            try:
                return float(args.get(name, 0)) >= limit
            except (TypeError, ValueError):
                return True  # fail closed

        return needs
    return lambda args: True  # an unreadable policy fails closed


@functools.lru_cache(maxsize=64)
def _profile_tools(profile_id: int, version: str, policies: str) -> ToolRegistry:
    """The registry with the profile's approval policies applied (cached per profile
    version). Tools are shallow copies: schemas are built once, at registration."""
    rules = json.loads(policies)
    tools = []
    for tool in registry():
        predicate = _policy_predicate(rules.get(tool.name))
        if predicate is not None:
            tool = copy.copy(tool)
            tool.approval = predicate
        tools.append(tool)
    return ToolRegistry(tools)


def profile_tools(profile: AgentProfile) -> ToolRegistry:
    if not profile.approval_policies:
        return registry()
    policies = json.dumps(profile.approval_policies, sort_keys=True)
    return _profile_tools(profile.pk, profile.updated_at.isoformat(), policies)


def build_agent(run: Run, journal: DbJournal | None = None) -> Agent:
    profile = run.agent
    spec = run.model or settings.AGENTWEB_MODEL
    model = model_for(spec)
    # What each model call sees: system prompt, pinned facts, summary, working window and
    # the most relevant tools, within the profile's token budget (scripted models see
    # every tool: they play fixed scenarios).
    policy = LayeredContextPolicy.for_model(model, profile.context_budget_tokens, spec=spec)
    tools = policy.with_search_tool(profile_tools(profile).subset(allowed_tools(profile)))
    from agentweb.runs.delegation import tools_for

    delegation_tools = tools_for(profile)  # delegate_task, wait_for_tasks (DESIGN §8)
    if delegation_tools:
        tools = ToolRegistry([*tools, *delegation_tools])
    config = AgentConfig(
        system_prompt=render_prompt(profile.system_prompt, prompt_variables(run)),
        max_iterations=profile.max_iterations,
        allowed_tools=tools.names(),
        risk_overrides=dict(profile.risk_overrides or {}),
        stream=settings.AGENTWEB_STREAM,
        max_reply_chars=settings.AGENTWEB_MAX_REPLY_CHARS,
    )
    # Completion layer 1: a claimed refund, cancellation, address change or reply must
    # show in the shop (for runs without a ticket too).
    from agentweb.shop.validators import validator_for_ticket

    validator = validator_for_ticket(run.ticket_id, since=run.created_at)
    return Agent(
        model=model,
        tools=tools,
        config=config,
        validator=validator,
        journal=journal,
        context_policy=policy,
    )
