"""What became of a run's actions: every medium- or high-risk call with its fate.

One place computes it, from the rows that are the truth for it (``Approval`` and
``ToolExecution``), so the API, the pages and the exports agree. An entry is
``{"tool", "call_id", "status", "approved_by"}``:

- ``status``: ``pending`` (waiting for a person, or approved and not run yet),
  ``executed``, ``failed`` (it ran and reported an error, or its check refused it),
  ``rejected``, ``expired``, ``cancelled`` (its run ended before it could run);
- ``approved_by``: ``person`` when a person approved it, ``policy`` when it ran without
  one (a rule or its risk level allowed it), else null.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentweb.runs.models import Approval, Run, ToolExecution

RISKY = ("medium", "high")


def _risk_of(run: Run, tool: str) -> str:
    from agentweb.runs.agents import registry

    override = (run.agent.risk_overrides or {}).get(tool) if run.agent_id else None
    if override:
        return str(override)
    from agentweb.runs.delegation import builtin

    found = registry().get(tool) or builtin(tool)  # delegate_task, wait_for_tasks: low
    return str(found.risk) if found is not None else "high"


def _entries(
    run: Run, approvals: Iterable[Approval], executions: Iterable[ToolExecution]
) -> list[dict[str, Any]]:
    by_call: dict[str, dict[str, Any]] = {}
    order: list[tuple[Any, str]] = []
    execs = {e.call_id: e for e in executions}
    for asked in approvals:
        by_call[asked.call_id] = {"tool": asked.tool, "approval": asked}
        order.append((asked.requested_at, asked.call_id))
    for ran in execs.values():
        if ran.call_id in by_call or _risk_of(run, ran.tool) not in RISKY:
            continue
        by_call[ran.call_id] = {"tool": ran.tool, "approval": None}
        order.append((ran.started_at, ran.call_id))
    final = run.status in Run.FINAL
    out = []
    for _, call_id in sorted(order, key=lambda pair: (pair[0], pair[1])):
        item = by_call[call_id]
        approval: Approval | None = item["approval"]
        execution = execs.get(call_id)
        approved_by: str | None = None
        if approval is None:
            approved_by = "policy"
        elif approval.status == Approval.Status.APPROVED:
            approved_by = "person"
        if approval is not None and approval.status not in (
            Approval.Status.APPROVED,
            Approval.Status.PENDING,
        ):
            status = str(approval.status)  # rejected | expired | cancelled
        elif approval is not None and approval.status == Approval.Status.PENDING:
            status = "cancelled" if final else "pending"
        elif execution is None or execution.status in (
            ToolExecution.Status.STARTED,
            ToolExecution.Status.UNKNOWN,
        ):
            status = "cancelled" if final and execution is None else "pending"
        elif execution.status == ToolExecution.Status.SUCCEEDED:
            status = "executed"
        else:
            status = "failed"
        out.append(
            {"tool": item["tool"], "call_id": call_id, "status": status, "approved_by": approved_by}
        )
    return out


def run_actions(run: Run) -> list[dict[str, Any]]:
    """The actions of one run, in the order they were asked for."""
    return _entries(
        run,
        Approval.objects.filter(run=run).only("call_id", "tool", "status", "requested_at"),
        ToolExecution.objects.filter(run=run).only("call_id", "tool", "status", "started_at"),
    )


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
    return {r.pk: _entries(r, approvals[r.pk], executions[r.pk]) for r in runs}


def troubles(actions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The actions a page should point out beside the run's status."""
    return [a for a in actions if a["status"] in ("rejected", "failed", "expired", "cancelled")]
