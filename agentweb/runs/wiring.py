"""Turning an agent profile and a run into a runtime Agent (the only bridge to the engine).

``build_agent`` puts together what the profile names (model, tools, prompt, budgets,
approval rules, validator) and what the run brings (its prompt variables, its journal,
its image store, the totals of earlier calls).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.utils import timezone

from agentweb.runs import agents, delegation, people, policies, prompts, toolset
from agentweb.runs.images import DbImageStore
from agentweb.runs.journal import DbJournal
from agentweb.runs.models import Run
from agentweb.runtime.context import LayeredContextPolicy
from agentweb.runtime.loop import Agent, AgentConfig, BudgetCheck, BudgetExceeded
from agentweb.runtime.state import LoopState
from agentweb.runtime.tools import ToolRegistry

_VAR = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


def render_prompt(template: str, variables: dict[str, str]) -> str:
    """Fill ``{{name}}`` placeholders; unknown names are left visible, never guessed."""
    return _VAR.sub(lambda m: variables.get(m.group(1), m.group(0)), template)


def prompt_variables(run: Run, offered: Sequence[str]) -> dict[str, str]:
    """A value for each of ``prompts.VARIABLES`` (a profile's prompt may use no other);
    ``{{tools}}`` names the tools the run is ``offered``, not every tool this process
    could offer (an MCP server's tools reach a profile only by name)."""
    ticket = run.ticket
    values = {
        "user": run.created_by.get_username(),
        "now": timezone.now().strftime("%Y-%m-%d %H:%M UTC"),
        "ticket": ticket.as_prompt() if ticket else "(no ticket)",
        "ticket_id": str(ticket.pk) if ticket else "",
        "customer": ticket.customer_label if ticket else "(unknown)",
        "customer_id": ticket.customer_id if ticket else "",
        "tools": ", ".join(offered),
    }
    assert tuple(values) == prompts.VARIABLES, "prompts.VARIABLES names what runs fill in"
    return values


#: Who supplies a run's budget check (``runtime.Agent(budget=...)``): the budgets app
#: registers one (``agentweb/budgets/wiring.py``); none registered, no budget is checked.
BudgetFactory = Callable[[Run], BudgetCheck | None]
_budget_factories: list[BudgetFactory] = []


def on_budget_check(factory: BudgetFactory) -> None:
    if factory not in _budget_factories:
        _budget_factories.append(factory)


def _budget_check(run: Run) -> BudgetCheck | None:
    checks = [c for c in (f(run) for f in _budget_factories) if c is not None]
    if len(checks) <= 1:
        return checks[0] if checks else None

    def every(state: LoopState) -> BudgetExceeded | None:
        return next((found for check in checks if (found := check(state))), None)

    return every


def build_agent(run: Run, journal: DbJournal | None = None) -> Agent:
    profile = run.agent
    spec = run.model or settings.AGENTWEB_MODEL
    model = agents.model_for(spec)
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
        **toolset.policy_options(),
    )
    tools = policy.with_search_tool(toolset.registry().subset(toolset.allowed_tools(profile)))
    delegation_tools = delegation.tools_for(profile)  # delegate_task, wait_for_tasks
    if delegation_tools:
        tools = ToolRegistry([*tools, *delegation_tools])
    config = AgentConfig(
        system_prompt=render_prompt(profile.system_prompt, prompt_variables(run, tools.names())),
        max_iterations=profile.max_iterations,
        allowed_tools=tools.names(),
        risk_overrides=dict(profile.risk_overrides or {}),
        stream=settings.AGENTWEB_STREAM,
        max_reply_chars=settings.AGENTWEB_MAX_REPLY_CHARS,
        vision=profile.vision,
        # The profile's approval rules wrap the tools' own (runtime.approvals); totals
        # of earlier calls come from the journal and the approvals (runs.policies).
        # (how many people decide, and when it escalates, is the host's: runs.policies)
        approval_policies=people.runtime_policies(profile.approval_policies),
        model_deadline=float(settings.AGENTWEB_MODEL_DEADLINE_SECONDS),
        # run_started says what the model is not offered although the profile names it
        missing_tools=toolset.missing_tools(profile),
        agent_version=run.agent_version,  # the profile version it runs (DESIGN §14)
        dry_run=run.mode == Run.Mode.DRY,  # medium/high-risk calls never execute
    )
    # Completion validator: only the one the profile names (none by default).
    validator = agents.load_validator(profile.validator) if profile.validator else None
    return Agent(
        model=model,
        tools=tools,
        config=config,
        validator=validator,
        validator_name=profile.validator or None,
        journal=journal,
        context_policy=policy,
        image_store=DbImageStore(run),
        prior_total=policies.prior_total,
        budget=_budget_check(run),  # asked before every model call
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
