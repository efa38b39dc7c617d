"""A run's life cycle: every change of a run's status happens here.

    queued ──claim──▶ running ──a step──▶ running
      ▲                 ├──▶ succeeded | failed | cancelled          (final: ``ended``)
      │                 ├──▶ waiting_approval ──the last decision──┐
      │                 └──▶ waiting_subtasks ──the last child ends─┤
      ├─────────────────────────────────────────────────────────────┘
      └── the sweep: a lease that expired (its worker died), a message the broker lost

The fields that belong together are set together, here only: a run that ends gets its
final status, ``finished_at`` and its lease cleared (``_closed``); a run that pauses
lets its lease go (``_paused``); a run that goes back to the queue gets a pick-up
deadline and a wake-up after commit (``_queued``, ``queue.enqueue_on_commit``).

Unless said otherwise a function runs inside the caller's transaction with the run's
row locked (``select_for_update``), and what it changed is told after commit: events
(``store``), the run lists (``publish``), the parent of a child run, a worker.
Locks are only ever taken upwards (a child's row, then its parent's, then the top
run's); children are cancelled in their own transactions after their parent's commit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agentweb.runs import loading, publish, queue, store
from agentweb.runs.models import Approval, ApprovalVote, Run, ToolExecution, arguments_hash
from agentweb.runs.people import people_for
from agentweb.runs.queue import QUEUE_GRACE
from agentweb.runtime import events as ev
from agentweb.runtime.state import Failed, Finished, NeedsApproval, NeedsSubtasks

log = logging.getLogger(__name__)

#: What a parent's model reads of a child's answer or error, at most.
RESULT_CHARS = 4000
USAGE_KEYS = ("input_tokens", "output_tokens", "model_calls", "cost_usd")


def lease() -> timedelta:
    """How long a worker's claim on a run lasts without a renewal."""
    return timedelta(seconds=settings.AGENTWEB_LEASE_SECONDS)


def approval_expiry() -> Any:
    return timezone.now() + timedelta(hours=settings.AGENTWEB_APPROVAL_TTL_HOURS)


# --- the fields that belong together -------------------------------------------------------


def _closed(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "status": status,
        "finished_at": timezone.now(),
        "lease_owner": "",
        "lease_expires_at": None,
        **fields,
    }


def _paused(status: str, **fields: Any) -> dict[str, Any]:
    return {"status": status, "lease_owner": "", "lease_expires_at": None, **fields}


def _queued(**fields: Any) -> dict[str, Any]:
    return {"status": Run.Status.QUEUED, "lease_expires_at": timezone.now() + QUEUE_GRACE, **fields}


def _apply(run: Run, fields: dict[str, Any]) -> None:
    for key, value in fields.items():
        setattr(run, key, value)


# --- start --------------------------------------------------------------------------------


def create(**fields: Any) -> Run:
    """A new queued run (top-level or a child), enqueued and told to the lists on commit."""
    run = Run.objects.create(**_queued(**fields))
    # First: the worker's wake-up is what the run waits for. A child's parent is under way
    # and waits for it; a top-level run waits behind the runs under way.
    queue.enqueue_on_commit(run.pk, new=run.parent_id is None)
    publish.run_status_on_commit(run.pk, run.status)
    return run


#: The first half of the advisory lock key a worker holds on each run it works on (its
#: lease keeper's own PostgreSQL session takes it; the second half is the run's id): a run
#: whose lease ran out while that session lives is not taken over (``claim``,
#: ``requeue_stale``). Ids wrap at 2**31 in the key.
RUN_LOCK_SPACE = 0x61770002  # "aw" 0002


def run_lock_key(run_id: int) -> int:
    return run_id % 2147483648


_CLAIM = (
    "UPDATE runs_run SET status = %s, lease_owner = %s, lease_expires_at = %s, "
    "attempts = attempts + 1, started_at = COALESCE(started_at, %s) "
    "WHERE id = %s AND CASE WHEN status = %s THEN true "
    "WHEN status = %s AND lease_expires_at < %s "
    # nobody's session holds the run's lock (taken for this transaction only)
    "THEN pg_try_advisory_xact_lock(%s, (id %% 2147483648)::int) ELSE false END "
    "RETURNING trace_id"
)
_CLAIM_NO_FLUSH_WAIT = "SET LOCAL synchronous_commit = off; " + _CLAIM


def _claim_params(run_id: int, owner: str, now: Any) -> list[Any]:
    return [
        Run.Status.RUNNING,
        owner,
        now + lease(),
        now,
        run_id,
        Run.Status.QUEUED,
        Run.Status.RUNNING,
        now,
        RUN_LOCK_SPACE,
    ]


def claim(run_id: int, owner: str) -> str | None:
    """Take the run if it is queued, or running under a lease that expired while no live
    worker holds it (one conditional UPDATE, no row lock taken beforehand). Returns the
    run's trace id when taken (for the worker's log lines), None when not.

    A worker whose lease keeper was starved (a busy machine, an exhausted pool) still
    holds the run's advisory lock in its keeper's session, so its run is not taken over
    while that worker lives: the step it is in the middle of is never paid for twice.
    A worker that died lost its session, and with it the lock.

    The claim's commit does not wait for the WAL to reach the disk (as a mid-run step's:
    ``engine._lock_run``): a claim lost with a crash of PostgreSQL leaves the run queued,
    the worker's first step finds it not running and stops, and the sweep wakes the run
    again; the first call with effects commits with the flush, which also flushes the
    claim."""
    now = timezone.now()
    with connection.cursor() as cursor:
        no_flush_wait = not connection.in_atomic_block and isinstance(
            cursor.cursor, psycopg.ClientCursor
        )
        cursor.execute(
            (_CLAIM_NO_FLUSH_WAIT if no_flush_wait else _CLAIM),
            _claim_params(run_id, owner, now),
        )
        if no_flush_wait:
            cursor.nextset()  # past the SET's empty result
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def claim_and_read(run_id: int, owner: str) -> Run | None:
    """``claim``, and when it took the run, the run as the worker reads it (with its
    profile, starter and ticket: ``loading.run_for_worker``); None when not taken. The
    read goes in the claim's round trip, after the UPDATE, so it sees the claim's values
    (one statement string; both run in one implicit transaction), and so do the reads
    other apps registered (``loading.read_with_claim``). Where statements cannot
    share an execute (a cursor that binds on the server, an open transaction: tests),
    the claim and the read are sent one after the other."""
    with connection.cursor() as cursor:
        together = not connection.in_atomic_block and isinstance(
            cursor.cursor, psycopg.ClientCursor
        )
        if together:
            now = timezone.now()
            read_sql, read_params = loading.run_query(run_id)
            extra = loading.claim_reads()
            cursor.execute(
                "; ".join([_CLAIM_NO_FLUSH_WAIT, read_sql, *extra]),
                [*_claim_params(run_id, owner, now), *read_params, *[run_id] * len(extra)],
            )
            cursor.nextset()  # past the SET's empty result
            claimed = cursor.fetchone()
            cursor.nextset()
            rows = cursor.fetchall()
            found = []
            for _ in extra:
                cursor.nextset()
                found.append([tuple(row) for row in cursor.fetchall()])
    if not together:
        if claim(run_id, owner) is None:
            return None
        return loading.run_for_worker(run_id)
    if claimed is None:
        return None
    run = loading.run_from_rows(run_id, rows)
    loading.keep_claim_reads(run, found)
    return run


# --- a step's outcome ---------------------------------------------------------------------


def outcome_fields(run: Run, outcome: Any, events: list[ev.Event]) -> dict[str, Any]:
    """The run's row fields for what a step ended with (inside the step's locked
    transaction; the engine writes them with the step's own UPDATE, then calls ``ended``
    for a final status). A pause for approval opens the approvals and adds their
    ``approval_requested`` events to ``events``. ``Cancelled`` goes to
    ``finish_cancelled`` instead; None (the run goes on) changes nothing."""
    if isinstance(outcome, Finished):
        return _closed(
            Run.Status.SUCCEEDED, final_answer=outcome.answer, decided_by=outcome.decided_by
        )
    if isinstance(outcome, Failed):
        return _closed(Run.Status.FAILED, failure_reason=outcome.reason)
    if isinstance(outcome, NeedsApproval):
        _open_approvals(run, outcome, events)
        return _paused(Run.Status.WAITING_APPROVAL)
    if isinstance(outcome, NeedsSubtasks):
        return _pause_for_subtasks(run, outcome)
    return {}


def _open_approvals(run: Run, outcome: NeedsApproval, events: list[ev.Event]) -> None:
    announced = {e.call_id for e in events if isinstance(e, ev.ApprovalRequested)}
    expires = approval_expiry()
    for pending in outcome.calls:
        approval, created = Approval.objects.get_or_create(
            run=run,
            call_id=pending.call_id,
            defaults={
                "tool": pending.tool,
                "arguments": pending.arguments,
                "arguments_hash": arguments_hash(pending.arguments),
                "risk": pending.risk,
                "reason": pending.reason or "",
                "expires_at": expires,
                "approvals_needed": people_for(run.agent.approval_policies, pending.tool).approvers,
            },
        )
        if pending.reason == "unknown_outcome":
            if not created and approval.status != Approval.Status.PENDING:
                # The call was approved before and its execution's outcome is unknown:
                # the same request goes back to a person (the audit log keeps both).
                Approval.objects.filter(pk=approval.pk).update(
                    status=Approval.Status.PENDING,
                    reason="unknown_outcome",
                    decided_by=None,
                    decided_at=None,
                    approved_hash="",
                    expires_at=expires,
                )
                ApprovalVote.objects.filter(approval=approval).delete()  # decided afresh
                created = True
            ToolExecution.objects.filter(
                run=run, call_id=pending.call_id, status=ToolExecution.Status.STARTED
            ).update(status=ToolExecution.Status.UNKNOWN)
        if created and pending.call_id not in announced:
            requested = ev.approval_requested(
                call_id=pending.call_id,
                tool=pending.tool,
                arguments=pending.arguments,
                risk=pending.risk,
                reason=pending.reason or "",
            )
            events.append(requested)
        if created:
            store.audit(
                "approval_requested",
                actor=None,
                run=run,
                call_id=pending.call_id,
                tool=pending.tool,
                arguments=pending.arguments,
                risk=pending.risk,
            )
    publish.approvals_changed_on_commit()


def _pause_for_subtasks(run: Run, outcome: NeedsSubtasks) -> dict[str, Any]:
    """A parent waits for its children: ``waiting_subtasks`` until the last awaited child
    ends (``ended`` wakes it); straight back to the queue when every one of them ended
    meanwhile (before this commit)."""
    ids = [int(i) for i in outcome.waiting_on if isinstance(i, int) or str(i).isdigit()]
    if Run.objects.filter(parent=run, pk__in=ids, status__in=Run.ACTIVE).exists():
        return _paused(Run.Status.WAITING_SUBTASKS, awaiting_tasks=ids)
    queue.enqueue_on_commit(run.pk)
    return _queued(awaiting_tasks=[], lease_owner="")


# --- the end --------------------------------------------------------------------------------


def finish_cancelled(run: Run, *, by: str = "") -> None:
    """Close the run as cancelled, with its pending approvals."""
    closed = Approval.objects.filter(run=run, status=Approval.Status.PENDING).update(
        status=Approval.Status.CANCELLED, decided_at=timezone.now(), comment="run cancelled"
    )
    fields = _closed(Run.Status.CANCELLED)
    _apply(run, fields)
    run.save(update_fields=list(fields))
    store.append_events(run, [ev.run_cancelled(by=by).to_json()])
    if closed:
        publish.approvals_changed_on_commit()
    ended(run)


def fail(run: Run, reason: str) -> None:
    """Close the run as failed with ``reason`` (an error outside the runtime's own)."""
    fields = _closed(Run.Status.FAILED, failure_reason=reason[:2000])
    _apply(run, fields)
    run.save(update_fields=list(fields))
    store.append_events(run, [ev.run_failed(reason=run.failure_reason).to_json()])
    ended(run)


def request_cancel(run: Run, *, by: str) -> None:
    """Cancel an active run: a running one at its next step (its worker sees the flag),
    any other at once."""
    if run.status == Run.Status.RUNNING:
        Run.objects.filter(pk=run.pk).update(cancel_requested=True)
        run.cancel_requested = True
    else:
        finish_cancelled(run, by=by)


def ended(run: Run) -> None:
    """Inside the transaction that moved ``run`` to a final status (its row locked).

    Reports to the parent (``subtask_finished``, usage rolled up, the parent woken when
    this was the last child it waits for) and cancels this run's active children after
    commit (a run whose profile has no ``delegates`` never had the tool that makes
    children: nothing to look for)."""
    if not Run.agent.is_cached(run) or run.agent.delegates:
        transaction.on_commit(lambda: cancel_children(run.pk))
    if run.parent_id is None:
        return
    done = Run.objects.only("status", "final_answer", "failure_reason", "usage").get(pk=run.pk)
    own = own_usage(done.usage or {})
    parent = Run.objects.select_for_update().get(pk=run.parent_id)
    store.append_events(parent, [ev.subtask_finished(task_result(done)).to_json()])
    ancestors = [parent]
    if parent.parent_id is not None:
        ancestors.append(Run.objects.select_for_update().get(pk=parent.parent_id))
    for ancestor in ancestors:
        Run.objects.filter(pk=ancestor.pk).update(usage=roll_up(ancestor.usage or {}, own))
    _wake_parent(parent)


def task_result(child: Run) -> ev.SubtaskFinishedData:
    """What the parent's model reads about one ended child (``subtask_finished``, and
    ``wait_for_tasks``' result)."""
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


def cancel_children(run_id: int, reason: str = "") -> None:
    """Cancel the active children of an ended run, each in its own transaction (not in
    the caller's): a waiting or queued one at once, a running one at its next step."""
    child_ids = Run.objects.filter(parent_id=run_id, status__in=Run.ACTIVE).values_list(
        "pk", flat=True
    )
    for child_id in list(child_ids):
        with transaction.atomic():
            child = Run.objects.select_for_update().get(pk=child_id)
            if child.status in Run.ACTIVE:
                request_cancel(child, by=reason or f"run {run_id} ended")


def cancel_orphans() -> int:
    """Sweep: children still active under an ended parent (a worker died between the
    parent's end and the cancellation of its children). Its own transactions."""
    parents = set(
        Run.objects.filter(status__in=Run.ACTIVE, parent__status__in=Run.FINAL).values_list(
            "parent_id", flat=True
        )[:500]
    )
    for parent_id in parents:
        if parent_id is not None:
            cancel_children(parent_id)
    return len(parents)


# --- back to the queue ----------------------------------------------------------------------


def _requeue(run: Run, waiting: str, *unless: Any, **fields: Any) -> bool:
    """``run`` (row locked) from the ``waiting`` status back to the queue, exactly once
    (a conditional UPDATE; not where an ``unless`` expression holds), with a wake-up and
    the lists told after commit."""
    found = Run.objects.filter(pk=run.pk, status=waiting)
    for condition in unless:
        found = found.exclude(condition)
    woken = found.update(**_queued(**fields))
    if woken:
        run.status = Run.Status.QUEUED
        publish.run_status_on_commit(run.pk, run.status)
        queue.enqueue_on_commit(run.pk)
    return bool(woken)


def resume_if_decided(run: Run, **fields: Any) -> bool:
    """A run waiting for approval goes back to the queue once none of its approvals is
    pending (after a decision or an expiry): one UPDATE that also asks that. ``fields``:
    more of the run's columns written by that UPDATE when it resumes. True if it did."""
    if run.status != Run.Status.WAITING_APPROVAL:
        return False
    pending = Approval.objects.filter(run=OuterRef("pk"), status=Approval.Status.PENDING)
    return _requeue(run, Run.Status.WAITING_APPROVAL, Exists(pending), **fields)


def _wake_parent(parent: Run) -> None:
    """The parent (row locked) goes back to the queue once none of its awaited children
    is active."""
    if parent.status != Run.Status.WAITING_SUBTASKS:
        return
    waiting = [int(i) for i in parent.awaiting_tasks or ()]
    if Run.objects.filter(parent=parent, pk__in=waiting, status__in=Run.ACTIVE).exists():
        return
    _requeue(parent, Run.Status.WAITING_SUBTASKS, awaiting_tasks=[])


def retry_soon(run_id: int) -> None:
    """An attempt that crashed outside the runtime: the sweep takes the run up again
    from its last stored step at its next tick."""
    Run.objects.filter(pk=run_id).update(lease_owner="", lease_expires_at=timezone.now())


def requeue_stale() -> list[int]:
    """Sweep: runs whose worker died (the lease expired and no live session holds the
    run's lock), and queued runs nobody claimed in time, go back to the queue (their own
    transaction), each with a pick-up deadline: the next ticks do not send them again
    while they wait their turn in a long queue (was: a running run whose lease expired
    was sent again at every tick until a worker got to it, 17 times in 45 s under load).

    Recovery does not wait for the broker's visibility timeout: the lease is ours."""
    now = timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, status FROM runs_run WHERE status IN (%s, %s) "
                "AND lease_expires_at < %s "
                "AND CASE WHEN status = %s "
                "THEN pg_try_advisory_xact_lock(%s, (id %% 2147483648)::int) ELSE true END "
                "ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED",
                [Run.Status.RUNNING, Run.Status.QUEUED, now, Run.Status.RUNNING, RUN_LOCK_SPACE],
            )
            rows = cursor.fetchall()
        stale = [run_id for run_id, _ in rows]
        orphaned = [run_id for run_id, status in rows if status == Run.Status.RUNNING]
        Run.objects.filter(pk__in=stale).update(
            status=Run.Status.QUEUED, lease_owner="", lease_expires_at=now + QUEUE_GRACE
        )
        for run_id in orphaned:
            publish.run_status_on_commit(run_id, Run.Status.QUEUED)
        for run_id in stale:
            queue.enqueue_on_commit(run_id)
    if stale:
        log.warning("re-enqueued %d runs whose lease expired: %s", len(stale), stale)
    return stale


def due_now_if_messages_lost(queue_length: int | None) -> None:
    """A Redis that restarted empty lost the messages of queued runs: when the queue is
    empty, queued runs older than a few seconds are due now, not after the queue grace
    (a run that does have a message is claimed once; the extra message is a no-op)."""
    if queue_length not in (0, None):
        return
    now = timezone.now()
    Run.objects.filter(
        status=Run.Status.QUEUED,
        created_at__lt=now - timedelta(seconds=10),
        lease_expires_at__gt=now,
    ).update(lease_expires_at=now)
