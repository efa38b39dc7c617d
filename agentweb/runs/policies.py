"""The Django side of approval policies: totals of earlier calls, and which policies an
installation accepts.

The runtime (``agentweb.runtime.approvals``) decides per call; it asks ``prior_total``
for what earlier calls of a tool already moved, from the rows that record them.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.db.models import Q

from agentweb.runs.models import Approval, GroupKeys, ToolExecution
from agentweb.runtime.approvals import Threshold, group_key, parse_policy

#: Executions that count: done, or possibly done (a crash mid-call).
_COUNTED = (
    ToolExecution.Status.SUCCEEDED,
    ToolExecution.Status.STARTED,
    ToolExecution.Status.UNKNOWN,
)


def _amount(arguments: Any, argument: str) -> Decimal:
    try:
        value = Decimal(str((arguments or {}).get(argument)))
    except (InvalidOperation, ValueError, AttributeError):
        return Decimal(0)
    return value if value.is_finite() and value > 0 else Decimal(0)


def prior_total(tool: str, argument: str, sum_per: str, value: Any) -> float:
    """The total of ``argument`` over every earlier call of ``tool`` whose ``sum_per``
    argument is ``value``, in any run: executed (or possibly executed) ones, and ones
    pending or approved that have not run yet. Failed, rejected, expired and cancelled
    calls do not count."""
    # "A1006", "a1006" and " A1006 " are one order to a tool that normalises its ids, so
    # they are one group here too: narrowed in SQL through the indexed GroupKeys (the
    # group's key, or "*" for values SQL cannot normalise), compared in Python.
    wanted = group_key(value)
    total = Decimal(0)
    seen: set[tuple[int, str]] = set()
    executions = (
        ToolExecution.objects.alias(keys=GroupKeys("arguments"))
        .filter(_near("keys", sum_per, wanted), tool=tool)
        .order_by()
    )
    for run_id, call_id, status, arguments in executions.values_list(
        "run_id", "call_id", "status", "arguments"
    ):
        if group_key((arguments or {}).get(sum_per)) != wanted:
            continue
        seen.add((run_id, call_id))
        if status in _COUNTED:
            total += _amount(arguments, argument)
    approvals = (
        Approval.objects.alias(asked=GroupKeys("arguments"), edited=GroupKeys("edited_arguments"))
        .filter(tool=tool, status__in=[Approval.Status.PENDING, Approval.Status.APPROVED])
        .filter(_near("asked", sum_per, wanted) | _near("edited", sum_per, wanted))
        .order_by()
    )
    for run_id, call_id, arguments, edited in approvals.values_list(
        "run_id", "call_id", "arguments", "edited_arguments"
    ):
        final = edited or arguments
        if (run_id, call_id) not in seen and group_key((final or {}).get(sum_per)) == wanted:
            total += _amount(final, argument)
    return float(total)


def _near(keys: str, sum_per: str, wanted: str) -> Q:
    """Rows whose ``sum_per`` value may be in the group ``wanted`` (see ``GroupKeys``)."""
    return Q(**{f"{keys}__contains": {sum_per: wanted}}) | Q(
        **{f"{keys}__contains": {sum_per: "*"}}
    )


def policy_errors(policies: Any, risk_of: Any = None) -> str | None:
    """Why ``policies`` (a profile's ``approval_policies``) cannot be stored, or None.

    ``"never"`` for a high-risk tool needs ``AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK=1``: a
    person's approval is what makes those tools safe to offer."""
    example = (
        'an object of tool: "always" | "never" | "default" | '
        '{"argument": "amount", "at_least": 20, "sum_per": "order_id"}'
    )
    if not isinstance(policies, dict):
        return example
    for name, rule in policies.items():
        try:
            parsed = parse_policy(rule)
        except ValueError as exc:
            return f"{name}: {exc}; expected {example}"
        if isinstance(parsed, Threshold):
            for key in (parsed.argument, parsed.sum_per):
                if key is not None and (not key.isidentifier() or "__" in key):
                    return f"{name}: {key!r} is not an argument name"
        if parsed == "never" and not settings.AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK:
            risk = (risk_of or _tool_risk)(name)
            if risk == "high":
                return (
                    f'{name} is a high-risk tool: "never" (no approval) is refused unless '
                    "the installation sets AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK=1"
                )
    return None


def _tool_risk(name: str) -> str:
    from agentweb.runs.agents import registry

    found = registry().get(name)
    return str(found.risk) if found is not None else "unknown"
