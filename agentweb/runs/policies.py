"""The Django side of approval policies: totals of earlier calls, and which policies an
installation accepts.

The runtime (``agentweb.runtime.approvals``) decides per call; it asks ``prior_total``
for what earlier calls of a tool already moved, from the rows that record them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Q

from agentweb.runs.models import Approval, GroupKeys, ToolExecution
from agentweb.runtime.approvals import group_key

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


# --- how people decide: the host's part of a policy ------------------------------------

#: Keys of a policy that say how people decide, which the host applies (the runtime's
#: gate only decides whether a person must): how many distinct people must approve, and
#: after how many minutes a still pending request escalates.
PEOPLE_KEYS = frozenset({"approvers", "escalate_after_minutes"})
MAX_APPROVERS = 10


@dataclass(frozen=True, slots=True)
class People:
    approvers: int = 1
    escalate_after_minutes: float | None = None


def split_policy(rule: Any) -> tuple[Any, People]:
    """A profile's policy for one tool as the runtime's gate reads it, and its people part:
    ``{"argument": "amount", "at_least": 100, "approvers": 2}`` → the threshold rule and
    two approvers; ``{"approvers": 2}`` alone → ``"always"`` and two approvers. Raises
    ``ValueError`` for a bad people part."""
    if not isinstance(rule, Mapping) or not PEOPLE_KEYS & set(rule):
        return rule, People()
    approvers = rule.get("approvers", 1)
    if isinstance(approvers, bool) or not isinstance(approvers, int):
        raise ValueError("approvers must be a whole number of people")
    if not 1 <= approvers <= MAX_APPROVERS:
        raise ValueError(f"approvers must be from 1 to {MAX_APPROVERS}")
    minutes = rule.get("escalate_after_minutes")
    if minutes is not None:
        if isinstance(minutes, bool) or not isinstance(minutes, int | float):
            raise ValueError("escalate_after_minutes must be a number of minutes")
        if not math.isfinite(minutes) or minutes <= 0:
            raise ValueError("escalate_after_minutes must be more than 0")
    rest = {key: value for key, value in rule.items() if key not in PEOPLE_KEYS}
    people = People(approvers, float(minutes) if minutes is not None else None)
    return (rest or "always"), people


def runtime_policies(policies: Any) -> dict[str, Any]:
    """The profile's ``approval_policies`` as the runtime's gate reads them (people keys
    taken out). A policy whose people part is unreadable stays as it is: the gate then
    finds it unreadable and asks a person (fail closed)."""
    out: dict[str, Any] = {}
    for name, rule in (policies or {}).items() if isinstance(policies, dict) else ():
        try:
            out[name] = split_policy(rule)[0]
        except ValueError:
            out[name] = rule
    return out


def people_for(policies: Any, tool: str) -> People:
    """How people decide calls of ``tool`` under a profile's ``approval_policies``."""
    rule = policies.get(tool) if isinstance(policies, dict) else None
    try:
        return split_policy(rule)[1]
    except ValueError:
        return People()
