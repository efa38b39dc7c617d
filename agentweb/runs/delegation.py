"""Delegation to sub-agents: the built-in tools, child runs, the run tree.

A profile with ``delegates`` gets two built-in tools. ``delegate_task`` creates a child
run (an ordinary run with a parent), enqueues it and returns its id at once, so the
child runs on any worker, in parallel with its siblings (a lost message is re-sent by
the beat job like any queued run's). ``wait_for_tasks`` raises the runtime's ``Suspend``
while any of the tasks is active: the parent is stored as ``waiting_subtasks`` and its
worker returns.
What happens to a parent and its children as they pause, end and wake is the life
cycle's (``lifecycle``: the transaction that ends the last awaited child wakes the
parent with a conditional UPDATE on the locked parent row, exactly once, like an
approval decision; an ended run's children are cancelled after its commit).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import ParamSpec, TypeVar

from django.conf import settings
from django.db import transaction

from agentweb.runs import lifecycle, queue, versions
from agentweb.runs.lifecycle import task_result
from agentweb.runs.models import AgentProfile, Run
from agentweb.runs.toolset import BUILTIN_RISK, DELEGATE, WAIT
from agentweb.runtime import events as ev
from agentweb.runtime.tools import Suspend, Tool, ToolContext, ToolError

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

TOOL_NAMES = (DELEGATE, WAIT)
MAX_DEPTH = 3  # a top-level run is depth 1; a run at this depth may not delegate
MAX_CHILDREN = 10  # over a run's whole life


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
        risk=BUILTIN_RISK[DELEGATE],
        idempotent=True,  # one child per (run, call id), whatever the retries
        timeout=30.0,
    )
    wait = Tool(_wait_for_tasks, name=WAIT, risk=BUILTIN_RISK[WAIT], idempotent=True, timeout=30.0)
    return delegate, wait


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
        # It starts at once, on any worker, while its siblings are still being created.
        child = lifecycle.create(
            task=task,
            agent=profile,
            agent_version=versions.current(profile).n,
            mode=parent.mode,  # a dry run's sub-runs are dry too
            model=profile.model or settings.AGENTWEB_MODEL,
            ticket_id=parent.ticket_id,
            created_by_id=parent.created_by_id,
            parent=parent,
            root_id=parent.top_id,
            depth=parent.depth + 1,
            parent_call_id=call_id,
        )
    return child


def announce_children(run: Run, events: list[ev.Event]) -> list[ev.Event]:
    """In the step's transaction: a ``subtask_started`` event after each successful
    ``delegate_task`` call (the child itself was enqueued when it was created)."""
    delegated = [e for e in events if isinstance(e, ev.ToolCallFinished) and e.tool == DELEGATE]
    ids = [e.result["task_id"] for e in delegated if e.ok and isinstance(e.result, dict)]
    if not ids:
        return events
    children = {r.pk: r for r in Run.objects.filter(parent=run, pk__in=ids).select_related("agent")}
    out: list[ev.Event] = []
    for event in events:
        out.append(event)
        if not isinstance(event, ev.ToolCallFinished) or event.tool != DELEGATE:
            continue
        result = event.result
        task_id = result.get("task_id") if isinstance(result, dict) else None
        child = children.get(task_id) if isinstance(task_id, int) else None
        if child is None:
            continue
        out.append(ev.SubtaskStarted(task_id=child.pk, agent=child.agent.name, task=child.task))
        if child.status == Run.Status.QUEUED and (run.attempts > 1 or event.reused):
            # Made by a worker that died: its message may sit unacknowledged with that
            # worker's broker connection; send another (a repeated claim is a no-op).
            queue.enqueue_on_commit(child.pk)
    return out


# --- the tree -----------------------------------------------------------------------------


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
