"""A run's outcome apart from its status: a succeeded run that had an action rejected,
failed or expired "needs follow-up" (DESIGN §16), not a plain success. Also which runs
used a tool, counting calls that were proposed and never ran (rejected, expired).

Two forms of one rule: ``needs_follow_up(status, actions)`` over a run's ``actions``
(``outcomes.run_actions``), and ``follow_up_filter()``, the same in SQL for lists and
``?outcome=needs_follow_up`` (``tests/runs/test_follow_up.py`` holds them to each other).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Exists, F, Func, OuterRef, Q, TextField

from agentweb.runs.models import Approval, Run, RunEvent, ToolExecution
from agentweb.runs.toolset import BUILTIN_RISK, registry

#: The fates of an action that a person should look at after a "succeeded" run.
FOLLOW_UP = ("rejected", "failed", "expired")
#: The outcomes ``?outcome=`` filters on.
OUTCOMES = ("needs_follow_up",)


def needs_follow_up(status: str, actions: Iterable[Any]) -> bool:
    """True for a succeeded run with an action rejected, failed or expired. ``actions``:
    the run's action entries (dicts with ``status``) or outcomes (with ``.status``)."""
    if status != Run.Status.SUCCEEDED:
        return False
    for action in actions:
        fate = action.get("status") if isinstance(action, dict) else getattr(action, "status", "")
        if fate in FOLLOW_UP:
            return True
    return False


def _low_risk_tools() -> list[str]:
    """Tools whose own risk is low (a call of one is an action only when a profile raises
    it), as ``toolset.risk_of`` reads the risk: the loaded tools and the built-in ones."""
    try:
        loaded = [t.name for t in registry() if t.risk == "low"]
    except Exception:  # a broken tool module: every tool counts as risky (as outcomes does)
        loaded = []
    own = [name for name, risk in BUILTIN_RISK.items() if risk == "low"]
    return [*loaded, *own]


def follow_up_filter() -> Q:
    """Runs that need follow-up, as a filter of ``Run`` (one query, no rows read first).

    An action is rejected or expired by its approval; it failed when it ran with an error
    after a person approved it, or without an approval when it is a medium- or high-risk
    call for its run's profile (a ``risk_overrides`` entry, else the tool's own risk; an
    unknown tool counts as high), as ``outcomes.run_actions`` decides."""
    refused = Approval.objects.filter(
        run=OuterRef("pk"), status__in=[Approval.Status.REJECTED, Approval.Status.EXPIRED]
    )
    approved = Approval.objects.filter(
        run=OuterRef("run"), call_id=OuterRef("call_id"), status=Approval.Status.APPROVED
    )
    asked = Approval.objects.filter(run=OuterRef("run"), call_id=OuterRef("call_id"))
    override = Func(
        F("run__agent__risk_overrides"),
        F("tool"),
        function="jsonb_extract_path_text",
        output_field=TextField(),
    )
    risky = Q(override__in=["medium", "high"]) | (
        (Q(override__isnull=True) | Q(override="")) & ~Q(tool__in=_low_risk_tools())
    )
    failed = (
        ToolExecution.objects.filter(run=OuterRef("pk"), status=ToolExecution.Status.FAILED)
        .annotate(override=override)
        .filter(Exists(approved) | (~Exists(asked) & risky))
    )
    return Q(status=Run.Status.SUCCEEDED) & (Exists(refused) | Exists(failed))


def used_tool(name: str) -> Q:
    """Runs that called ``name``, or asked to: started calls, calls refused before they
    started (unknown arguments, a check), and calls a person was asked about (rejected,
    expired or still pending ones too)."""
    events = RunEvent.objects.filter(
        type__in=("tool_call_started", "tool_call_finished"), data__tool=name
    )
    asked = Approval.objects.filter(tool=name)
    return Q(pk__in=events.values("run_id")) | Q(pk__in=asked.values("run_id"))
