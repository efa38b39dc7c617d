"""The Django side of approval policies: totals of earlier calls, and which policies an
installation accepts.

The runtime (``agentweb.runtime.approvals``) decides per call; it asks ``prior_total``
for what earlier calls of a tool already moved, from the rows that record them.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Q

from agentweb.runs.models import Approval, GroupKeys, Run, ToolExecution
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
    calls do not count, nor anything of a dry run."""
    # "A1006", "a1006" and " A1006 " are one order to a tool that normalises its ids, so
    # they are one group here too: narrowed in SQL through the indexed GroupKeys (the
    # group's key, or "*" for values SQL cannot normalise), compared in Python.
    wanted = group_key(value)
    total = Decimal(0)
    seen: set[tuple[int, str]] = set()
    executions = (
        ToolExecution.objects.alias(keys=GroupKeys("arguments"))
        .filter(_near("keys", sum_per, wanted), tool=tool)
        .exclude(run__mode=Run.Mode.DRY)  # a dry run's calls move nothing (DESIGN §14)
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
        .exclude(run__mode=Run.Mode.DRY)
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
