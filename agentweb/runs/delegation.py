"""Delegation to sub-agents: child runs, durable waits, the run tree.

A profile with ``delegates`` gets two built-in tools. ``delegate_task`` creates a child
run (an ordinary run with a parent), enqueues it and returns its id at once, so the
child runs on any worker, in parallel with its siblings (a lost message is re-sent by
the beat job like any queued run's). ``wait_for_tasks`` raises the runtime's ``Suspend``
while any of the tasks is active: the parent is stored as ``waiting_subtasks`` and its
worker returns.
The transaction that ends the last awaited child wakes the parent with a conditional
UPDATE on the locked parent row, exactly once, like an approval decision.

Locks are only ever taken upwards (a child's row, then its parent's, then the top
run's); children are cancelled in their own transactions after their parent's commit.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentweb.runs import publish, queue
from agentweb.runs.models import AgentProfile, Run
from agentweb.runs.queue import QUEUE_GRACE
from agentweb.runtime import events as ev
from agentweb.runtime.state import NeedsSubtasks
from agentweb.runtime.tools import Suspend, Tool, ToolContext, ToolError

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

DELEGATE = "delegate_task"
WAIT = "wait_for_tasks"
TOOL_NAMES = (DELEGATE, WAIT)
MAX_DEPTH = 3  # a top-level run is depth 1; a run at this depth may not delegate
MAX_CHILDREN = 10  # over a run's whole life
RESULT_CHARS = 4000
USAGE_KEYS = ("input_tokens", "output_tokens", "model_calls", "cost_usd")


class DelegationError(ToolError):
    """A refused delegation: the model reads the message as the failed call's result."""


# --- the built-in tools -----------------------------------------------------------------


def _run_id(ctx: ToolContext) -> int:
    if not ctx.run_id:
        raise DelegationError("delegation needs a stored run")
    return int(ctx.run_id)


_DELEGATE_SUMMARY = (
    "Hand one piece of work to a specialist agent. It starts at once and runs in parallel "
    "with other delegated tasks; it sees only the task text you write (not this "
    "conversation), so include every fact it needs. Collect results with wait_for_tasks."
)


def _delegate_task(agent: str, task: str, ctx: ToolContext) -> dict[str, int]:
    """Hand one piece of work to a specialist agent.

    Args:
        agent: The specialist's profile name (one of those listed in this description).
        task: The work to do, complete and self-contained.
    """
    child = create_child(_run_id(ctx), agent, task, ctx.call_id)
    return {"task_id": child.pk}


def _wait_for_tasks(task_ids: list[int], ctx: ToolContext) -> list[ev.SubtaskFinishedData]:
    """Wait until the given delegated tasks have ended and return one result per task:
    its status ("succeeded" or "failed") and its result or error.

    Args:
        task_ids: The task_id values returned by delegate_task.
    """
    ids = list(dict.fromkeys(task_ids))
    if not ids:
        raise DelegationError("task_ids is empty: pass the task_id values from delegate_task")
    children = {r.pk: r for r in Run.objects.filter(parent_id=_run_id(ctx), pk__in=ids)}
    unknown = [i for i in ids if i not in children]
    if unknown:
        raise DelegationError(f"not tasks of this run: {unknown}")
    active = [i for i in ids if children[i].status in Run.ACTIVE]
    if active:
        raise Suspend(active)
    return [task_result(children[i]) for i in ids]


@functools.lru_cache(maxsize=128)
def _tools(delegates: tuple[str, ...]) -> tuple[Tool, Tool]:
    names = ", ".join(delegates)
    delegate = Tool(
        _delegate_task,
        name=DELEGATE,
        description=f"{_DELEGATE_SUMMARY} Agents you may delegate to: {names}.",
        idempotent=True,  # one child per (run, call id), whatever the retries
        timeout=30.0,
    )
    wait = Tool(_wait_for_tasks, name=WAIT, idempotent=True, timeout=30.0)
    return delegate, wait


def builtin(name: str) -> Tool | None:
    """The built-in delegation tool called ``name``, if it is one (for risk lookups)."""
    return dict(zip(TOOL_NAMES, _tools(()), strict=True)).get(name)


def tools_for(profile: AgentProfile) -> list[Tool]:
    """The built-in delegation tools for ``profile`` (none without ``delegates``)."""
    delegates = tuple(str(name) for name in profile.delegates or ())
    return list(_tools(delegates)) if delegates else []


# --- children ---------------------------------------------------------------------------


def create_child(parent_id: int, agent_name: str, task: str, call_id: str) -> Run:
    """The child run of ``parent_id`` for tool call ``call_id`` (created once; a retried
    call gets the same child). Raises ``DelegationError`` over a limit."""
    task = (task or "").strip()
    with transaction.atomic():
        # The parent's row lock serialises the calls of one turn, so the limits hold.
        parent = Run.objects.select_for_update().select_related("agent").get(pk=parent_id)
        existing = Run.objects.filter(parent=parent, parent_call_id=call_id).first()
        if existing is not None:
            return existing
        delegates = [str(n) for n in parent.agent.delegates or ()]
        if agent_name not in delegates:
            known = ", ".join(delegates) or "none"
            raise DelegationError(f"unknown agent {agent_name!r}; you may delegate to: {known}")
        if parent.depth >= MAX_DEPTH:
            raise DelegationError(
                f"refused: this task is at depth {parent.depth}, the limit is {MAX_DEPTH}; "
                "do the work yourself"
            )
        if parent.children.count() >= MAX_CHILDREN:
            raise DelegationError(
                f"refused: a run may delegate at most {MAX_CHILDREN} tasks, and this one has"
            )
        if not task:
            raise DelegationError("task must not be empty")
        if len(task) > 20000:
            raise DelegationError("task is too long (at most 20,000 characters)")
        profile = AgentProfile.objects.filter(name=agent_name).first()
        if profile is None:
            raise DelegationError(f"agent {agent_name!r} does not exist in this installation")
        child = Run.objects.create(
            task=task,
            agent=profile,
            model=profile.model or settings.AGENTWEB_MODEL,
            ticket_id=parent.ticket_id,
            created_by_id=parent.created_by_id,
            parent=parent,
            root_id=parent.top_id,
            depth=parent.depth + 1,
            parent_call_id=call_id,
            lease_expires_at=timezone.now() + QUEUE_GRACE,
        )
        # It starts at once, on any worker, while its siblings are still being created.
        queue.enqueue_on_commit(child.pk)
    return child


def announce_children(run: Run, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """In the step's transaction: a ``subtask_started`` event after each successful
    ``delegate_task`` call (the child itself was enqueued when it was created)."""
    ids = [
        e["data"]["result"]["task_id"]
        for e in events
        if e["type"] == "tool_call_finished"
        and e["data"].get("tool") == DELEGATE
        and e["data"].get("ok")
        and isinstance(e["data"].get("result"), dict)
    ]
    if not ids:
        return events
    children = {r.pk: r for r in Run.objects.filter(parent=run, pk__in=ids).select_related("agent")}
    out: list[dict[str, Any]] = []
    for event in events:
        out.append(event)
        if event["type"] != "tool_call_finished" or event["data"].get("tool") != DELEGATE:
            continue
        result = event["data"].get("result")
        task_id = result.get("task_id") if isinstance(result, dict) else None
        child = children.get(task_id) if isinstance(task_id, int) else None
        if child is None:
            continue
        out.append(
            ev.subtask_started(task_id=child.pk, agent=child.agent.name, task=child.task).to_json()
        )
        if child.status == Run.Status.QUEUED and (run.attempts > 1 or event["data"].get("reused")):
            # Made by a worker that died: its message may sit unacknowledged with that
            # worker's broker connection; send another (a repeated claim is a no-op).
            queue.enqueue_on_commit(child.pk)
    return out


def task_result(child: Run) -> ev.SubtaskFinishedData:
    """What the parent's model reads about one ended child."""
    if child.status == Run.Status.SUCCEEDED:
        answer = child.final_answer or ""
        out: ev.SubtaskFinishedData = {"task_id": child.pk, "status": "succeeded"}
        out["result"] = answer[:RESULT_CHARS]
        if len(answer) > RESULT_CHARS:
            out["truncated"] = True
        return out
    if child.status == Run.Status.CANCELLED:
        error = "the task was cancelled"
    else:
        error = child.failure_reason or "the task failed"
    return {"task_id": child.pk, "status": "failed", "error": error[:RESULT_CHARS]}


# --- pausing and waking -------------------------------------------------------------------


def pause_update(run: Run, outcome: NeedsSubtasks) -> dict[str, Any]:
    """The parent's row update for a ``NeedsSubtasks`` step (inside its locked step).

    When every awaited child ended meanwhile (before this commit), the run goes straight
    back to the queue; otherwise the last child's ending wakes it (``run_ended``)."""
    ids = [int(i) for i in outcome.waiting_on if isinstance(i, int) or str(i).isdigit()]
    still = Run.objects.filter(parent=run, pk__in=ids, status__in=Run.ACTIVE).exists()
    if still:
        return {
            "status": Run.Status.WAITING_SUBTASKS,
            "awaiting_tasks": ids,
            "lease_owner": "",
            "lease_expires_at": None,
        }
    queue.enqueue_on_commit(run.pk)
    return {
        "status": Run.Status.QUEUED,
        "awaiting_tasks": [],
        "lease_owner": "",
        "lease_expires_at": timezone.now() + QUEUE_GRACE,
    }


def run_ended(run: Run) -> None:
    """Inside the transaction that moved ``run`` to a final status (its row locked).

    Reports to the parent (``subtask_finished``, usage rolled up, the parent woken when
    this was the last child it waits for) and cancels this run's active children after
    commit."""
    transaction.on_commit(lambda: cancel_active_children(run.pk))
    if run.parent_id is None:
        return
    from agentweb.runs import actions

    ended = Run.objects.only("status", "final_answer", "failure_reason", "usage").get(pk=run.pk)
    own = own_usage(ended.usage or {})
    parent = Run.objects.select_for_update().get(pk=run.parent_id)
    result = task_result(ended)
    actions.append_events(parent, [ev.subtask_finished(result).to_json()])
    ancestors = [parent]
    if parent.parent_id is not None:
        ancestors.append(Run.objects.select_for_update().get(pk=parent.parent_id))
    for ancestor in ancestors:
        Run.objects.filter(pk=ancestor.pk).update(usage=roll_up(ancestor.usage or {}, own))
    _wake(parent)


def _wake(parent: Run) -> None:
    """The parent (row locked) goes back to the queue once none of its awaited children
    is active. The conditional UPDATE makes it exactly once."""
    if parent.status != Run.Status.WAITING_SUBTASKS:
        return
    waiting = [int(i) for i in parent.awaiting_tasks or ()]
    if Run.objects.filter(parent=parent, pk__in=waiting, status__in=Run.ACTIVE).exists():
        return
    woken = Run.objects.filter(pk=parent.pk, status=Run.Status.WAITING_SUBTASKS).update(
        status=Run.Status.QUEUED,
        awaiting_tasks=[],
        lease_expires_at=timezone.now() + QUEUE_GRACE,
    )
    if woken:
        parent.status = Run.Status.QUEUED
        publish.send_on_commit(
            publish.RUNS_GROUP, {"type": "run.status", "run": parent.pk, "status": parent.status}
        )
        queue.enqueue_on_commit(parent.pk)


def own_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """A run's usage without what its children rolled up into it."""
    children = usage.get("children") or {}
    out: dict[str, Any] = {}
    for key in USAGE_KEYS:
        value = float(usage.get(key, 0) or 0) - float(children.get(key, 0) or 0)
        out[key] = round(value, 6) if key == "cost_usd" else int(value)
    return out


def roll_up(usage: Mapping[str, Any], add: Mapping[str, Any]) -> dict[str, Any]:
    """``usage`` with ``add`` counted in its totals and in its ``children`` share."""
    total = dict(usage)
    children = dict(total.get("children") or {})
    for key in USAGE_KEYS:
        for target in (total, children):
            value = float(target.get(key, 0) or 0) + float(add.get(key, 0) or 0)
            target[key] = round(value, 6) if key == "cost_usd" else int(value)
    total["children"] = children
    return total


# --- cancellation -------------------------------------------------------------------------


def cancel_active_children(run_id: int, reason: str = "") -> None:
    """Cancel the active children of an ended run (each in its own transaction): a
    waiting or queued one at once, a running one at its next step."""
    from agentweb.runs import actions

    child_ids = Run.objects.filter(parent_id=run_id, status__in=Run.ACTIVE).values_list(
        "pk", flat=True
    )
    for child_id in list(child_ids):
        with transaction.atomic():
            child = Run.objects.select_for_update().get(pk=child_id)
            if child.status not in Run.ACTIVE:
                continue
            if child.status == Run.Status.RUNNING:
                Run.objects.filter(pk=child.pk).update(cancel_requested=True)
            else:
                actions.finish_cancelled(child, by=reason or f"run {run_id} ended")


def cancel_orphans() -> int:
    """Beat job: children still active under an ended parent (a worker died between the
    parent's end and the cancellation of its children)."""
    parents = set(
        Run.objects.filter(status__in=Run.ACTIVE, parent__status__in=Run.FINAL).values_list(
            "parent_id", flat=True
        )[:500]
    )
    for parent_id in parents:
        if parent_id is not None:
            cancel_active_children(parent_id)
    return len(parents)


# --- the tree -----------------------------------------------------------------------------


def tree_changed_on_commit(run: Run, types: Iterable[str]) -> None:
    """After commit: the pages of the runs whose tree shows ``run`` re-render it (its
    ancestors; and ``run`` itself when a subtask started or ended)."""
    groups = [i for i in (run.parent_id, run.root_id) if i is not None]
    if any(t.startswith("subtask_") for t in types):
        groups.append(run.pk)
    for run_id in dict.fromkeys(groups):
        publish.send_on_commit(publish.run_group(run_id), {"type": "run.tree", "run": run_id})


def tree(run: Run) -> list[Run]:
    """Every run under ``run`` (children, grandchildren), oldest first."""
    top = run.top_id
    runs = list(
        Run.objects.filter(root_id=top).select_related("agent").order_by("created_at", "pk")
    )
    if run.pk == top:
        return runs
    below: set[int] = {run.pk}
    out = []
    for r in runs:  # parents are created before their children
        if r.parent_id in below:
            below.add(r.pk)
            out.append(r)
    return out


def children_ids(runs: Iterable[Run]) -> dict[int, list[int]]:
    """Child ids of each of ``runs``, in one query."""
    ids = [r.pk for r in runs]
    out: dict[int, list[int]] = {i: [] for i in ids}
    for child_id, parent_id in (
        Run.objects.filter(parent_id__in=ids).order_by("pk").values_list("pk", "parent_id")
    ):
        out[parent_id].append(child_id)
    return out
