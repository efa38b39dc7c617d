"""What became of a run's actions, for one run or a page of runs: every medium- or
high-risk call with its fate (``models.actions_of`` says how it is computed, from the
``Approval`` and ``ToolExecution`` rows), so the API, the pages and the exports agree."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentweb.runs.models import Approval, Run, ToolExecution, actions_of


def run_actions(run: Run) -> list[dict[str, Any]]:
    """The actions of one run, in the order they were asked for."""
    return run.actions()


def actions_by_run(runs: Iterable[Run]) -> dict[int, list[dict[str, Any]]]:
    """The actions of many runs in two queries (for lists)."""
    runs = list(runs)
    ids = [r.pk for r in runs]
    approvals: dict[int, list[Approval]] = {i: [] for i in ids}
    executions: dict[int, list[ToolExecution]] = {i: [] for i in ids}
    for a in Approval.objects.filter(run_id__in=ids).only(
        "run_id", "call_id", "tool", "status", "requested_at"
    ):
        approvals[a.run_id].append(a)
    for e in ToolExecution.objects.filter(run_id__in=ids).only(
        "run_id", "call_id", "tool", "status", "started_at"
    ):
        executions[e.run_id].append(e)
    return {r.pk: actions_of(r, approvals[r.pk], executions[r.pk]) for r in runs}


def troubles(actions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The actions a page should point out beside the run's status."""
    return [a for a in actions if a["status"] in ("rejected", "failed", "expired", "cancelled")]
