"""The checks an agent profile's values must pass that need more than the values: the
loaded tools, the environment (model keys, validator modules), the installation's rules
for approval policies. ``AgentProfile.clean()`` calls them, so the admin, the /agents/
form, the API and ``agents import`` all run the same ones; ``FIELDS`` are a profile's
fields in JSON, in the order shown.

A leaf above the tool set: the models import it, it imports no model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.conf import settings

from agentweb.budgets.limits import budget_problem
from agentweb.runs import agents, prompts, toolset
from agentweb.runs.people import split_policy
from agentweb.runtime.approvals import Threshold, parse_policy

#: Fields of a profile in JSON, in the order shown; only name and system_prompt required
#: (their types and defaults: ``api_input.ProfileFields``).
FIELDS = (
    "name",
    "description",
    "system_prompt",
    "model",
    "allowed_tools",
    "tool_selection",
    "validator",
    "approval_policies",
    "risk_overrides",
    "max_iterations",
    "context_budget_tokens",
    "delegates",
    "vision",
    "budget",
)
MAX_TOP_N = 100


def profile_errors(profile: Any) -> dict[str, str]:
    """What is wrong with ``profile``'s values, by field (checks that need the loaded
    tools, the environment or the other profiles; ``clean()`` adds the shape checks)."""
    errors: dict[str, str] = {}
    loaded = set(toolset.registry().names())
    builtin = set(toolset.BUILTIN_RISK)  # offered by agentweb itself, never in a module
    kept = _stored_names(profile)
    for field in ("allowed_tools", "risk_overrides", "approval_policies"):
        names = getattr(profile, field)
        known = loaded | builtin
        if field == "allowed_tools":  # every tool of one MCP server: "<server>__*"
            known = known | toolset.tool_wildcards()
        if isinstance(names, list | dict):
            # A name the stored profile has already stays (its module may be unloaded
            # since: the page and its runs say so), so what `agents export` printed
            # imports again; a new unknown name is refused.
            known = known | kept.get(field, set())
            unknown = sorted(str(n) for n in names if n not in known)
            if unknown:
                errors[field] = (
                    f"unknown tools: {', '.join(unknown)} "
                    f"(loaded: {', '.join(sorted(loaded)) or 'none'})"
                )
    selection = str(profile.tool_selection or "").strip()
    if selection != "all" and not (
        selection.isascii() and selection.isdecimal() and 1 <= int(selection) <= MAX_TOP_N
    ):  # not str.isdigit: "²".isdigit(), and int("²") raises
        errors["tool_selection"] = f'"all" or a whole number from 1 to {MAX_TOP_N}'
    if profile.validator:
        problem = agents.validator_problem(profile.validator)
        if problem:
            errors["validator"] = problem
    if profile.model:
        problem = agents.model_problem(profile.model)
        if problem:
            errors["model"] = problem
    if profile.max_iterations is not None and not 1 <= profile.max_iterations <= 200:
        errors["max_iterations"] = "must be from 1 to 200"  # api_input says the same
    if profile.context_budget_tokens is not None and profile.context_budget_tokens < 1000:
        errors["context_budget_tokens"] = "must be at least 1000"
    if isinstance(profile.system_prompt, str):
        # A name the stored prompt already has stays (so an export imports again).
        problem = prompts.template_problem(
            profile.system_prompt, prompts.names_in(kept.get("system_prompt", ""))
        )
        if problem:
            errors["system_prompt"] = problem
    problem = budget_problem(getattr(profile, "budget", None))
    if problem:
        errors["budget"] = problem
    return errors


#: Completion validators agentweb brings (a profile may name any importable one).
BUNDLED_VALIDATORS = ("agentweb.shop.validators.claims_validator",)


def installation() -> dict[str, Any]:
    """What the OpenAPI document states for this installation beyond the models' rules:
    the tools a profile may name (with their risk), the ``<server>__*`` wildcards, the
    profiles, the validators in use, the model providers whose keys are set, and the
    settings approval policies depend on (``api_input._profile_schema``)."""
    profiles = apps.get_model("runs", "AgentProfile").objects
    tools = set(toolset.registry().names()) | set(toolset.BUILTIN_RISK)
    validators = set(BUNDLED_VALIDATORS) | {
        v for v in profiles.exclude(validator="").values_list("validator", flat=True)
    }
    return {
        "tools": tools,
        "risk": {name: toolset.risk_of(name) for name in tools},
        "arguments": {name: _argument_names(name) for name in tools},
        "wildcards": toolset.tool_wildcards(),
        "profiles": set(profiles.values_list("name", flat=True)),
        "validators": sorted(validators),
        "providers": [k for k in ("openai", "anthropic") if not agents.model_problem(f"{k}:m")],
        "unapproved_high_risk": bool(settings.AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK),
        "escalation": bool(settings.AGENTWEB_ESCALATION_GROUP),
    }


def _stored_names(profile: Any) -> dict[str, Any]:
    """The tool names the stored row of ``profile`` already has, per field, and its
    stored ``system_prompt`` (none for a new profile)."""
    if getattr(profile, "pk", None) is None:
        return {}
    row = (
        type(profile)
        .objects.filter(pk=profile.pk)
        .values("allowed_tools", "risk_overrides", "approval_policies", "system_prompt")
        .first()
    )
    if row is None:
        return {}
    kept: dict[str, Any] = {"system_prompt": str(row.pop("system_prompt") or "")}
    for field, value in row.items():
        kept[field] = {str(n) for n in value} if isinstance(value, list | dict) else set()
    return kept


def _argument_names(tool: str) -> set[str] | None:
    """The argument names of a loaded tool (None: not loaded, or its schema names none
    to hold a rule to)."""
    found = toolset.registry().get(tool)
    if found is None:
        return None
    properties = found.spec().parameters.get("properties")
    return set(properties) if isinstance(properties, dict) else None


def policy_errors(policies: Any, risk_of: Callable[[str], str] | None = None) -> str | None:
    """Why ``policies`` (a profile's ``approval_policies``) cannot be stored, or None.

    ``"never"`` for a high-risk tool needs ``AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK=1``: a
    person's approval is what makes those tools safe to offer. ``risk_of(tool)`` says how
    risky a tool is (default: ``toolset.risk_of`` without a profile's overrides)."""
    example = (
        'an object of tool: "always" | "never" | "default" | '
        '{"argument": "amount", "at_least": 20, "sum_per": "order_id"}, optionally with '
        '"approvers": 2 and "escalate_after_minutes": 30 (or {"approvers": 2} alone)'
    )
    if not isinstance(policies, dict):
        return example
    for name, rule in policies.items():
        try:
            runtime_rule, people = split_policy(rule)
            parsed = parse_policy(runtime_rule)
        except ValueError as exc:
            return f"{name}: {exc}; expected {example}"
        if people.escalate_after_minutes is not None and not settings.AGENTWEB_ESCALATION_GROUP:
            return (
                f"{name}: escalate_after_minutes needs the installation's "
                "AGENTWEB_ESCALATION_GROUP (who is told when nobody decided in time)"
            )
        if isinstance(parsed, Threshold):
            arguments = _argument_names(name)
            for key in (parsed.argument, parsed.sum_per):
                if key is not None and (not key.isidentifier() or "__" in key):
                    return f"{name}: {key!r} is not an argument name"
                if key is not None and arguments is not None and key not in arguments:
                    return (
                        f"{name} has no argument {key!r} "
                        f"(its arguments: {', '.join(sorted(arguments)) or 'none'})"
                    )
        if parsed == "never" and not settings.AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK:
            risk = risk_of(name) if risk_of is not None else toolset.risk_of(name)
            if risk == "high":
                return (
                    f'{name} is a high-risk tool: "never" (no approval) is refused unless '
                    "the installation sets AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK=1"
                )
    return None
