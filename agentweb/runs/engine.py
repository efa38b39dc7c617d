"""Drive one run through the runtime, one stored step at a time.

A worker claims the run with a conditional UPDATE and holds a lease it renews while it
works. Each runtime step is persisted (events, loop state, usage) in one transaction
that also checks the lease is still ours; events are published after commit. When the
runtime needs a human the run becomes ``waiting_approval`` and this returns: nothing
here waits for a person.

A step that only read, quickly, may wait for the next one and be stored with it, in its
transaction (``runs.waiting``): its reads changed nothing, so a worker that dies first
leaves nothing behind but a model call and reads to do again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection, models, transaction
from django.utils import timezone

from agentweb import dbpool
from agentweb.runs import (
    delegation,
    forks,
    leases,
    lifecycle,
    loading,
    publish,
    store,
    versions,
)
from agentweb.runs.batch import Batch
from agentweb.runs.faults import crash_point
from agentweb.runs.journal import DbJournal
from agentweb.runs.models import Approval, Run, RunEvent, ToolExecution, arguments_hash
from agentweb.runs.pricing import cost_usd
from agentweb.runs.toolset import registry, risk_of
from agentweb.runs.waiting import Waiting, may_wait
from agentweb.runs.wiring import build_agent, run_context
from agentweb.runtime import events as ev
from agentweb.runtime.messages import SystemMessage
from agentweb.runtime.state import (
    Cancelled,
    Decision,
    LoopState,
)
from agentweb.runtime.tools import ToolContext

log = logging.getLogger(__name__)

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


class LeaseLost(Exception):
    """Another worker took the run over; stop without writing anything."""


def execute_run(run_id: int, on_claimed: Callable[[str], None] | None = None) -> str | None:
    """Claim and advance a run until it finishes, fails, is cancelled or needs a human.
    ``on_claimed(trace_id)`` is called once the run is ours (the task's log lines).

    Returns the run's final status for this attempt, or None when it was not ours."""
    owner = f"{WORKER_ID}:{uuid.uuid4().hex[:8]}"
    run = lifecycle.claim_and_read(run_id, owner)  # with its profile, starter and ticket
    if run is None:
        return None
    # The row as the claim left it: the first step is stored behind the guard too.
    run.__dict__[_WRITTEN] = _Written(run.last_seq, dict(run.usage or {}))
    if on_claimed is not None:
        on_claimed(run.trace_id)
    publish.run_status_now(run_id, Run.Status.RUNNING)  # the steps tell only changes
    held = leases.keeper.hold(run_id, owner)
    try:
        return _drive(run, owner, held)
    except LeaseLost:
        log.warning("run %s: lease lost to another worker; stopping", run_id)
        return None
    except Exception as exc:
        log.exception("run %s: unexpected error", run_id)
        return _after_crash(run_id, owner, exc)
    finally:
        leases.keeper.release(owner)


MAX_ATTEMPTS = 3


def _after_crash(run_id: int, owner: str, exc: Exception) -> str | None:
    """An error outside the runtime's own handling (database, a bug): let the beat job
    retry from the last stored step soon, and give up with a stated reason after
    ``MAX_ATTEMPTS`` claims."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.lease_owner != owner or run.status != Run.Status.RUNNING:
            return None
        if run.attempts < MAX_ATTEMPTS:
            lifecycle.retry_soon(run_id)
            return Run.Status.RUNNING
        lifecycle.fail(
            run, f"internal error after {run.attempts} attempts: {type(exc).__name__}: {exc}"
        )
    return Run.Status.FAILED


def journal_for(run: Run) -> DbJournal:
    """The run's record of tool executions, with the installation's tools and risks (a
    fork's also knows what its source's calls returned)."""
    tool_of = registry().get

    def risk(name: str) -> str:
        return risk_of(name, run.agent)

    if run.forked_from_id is not None:
        recorded = forks.recorded_results(run.forked_from_id)
        return forks.ForkJournal(run, recorded, tool_of=tool_of, risk_of=risk)
    return DbJournal(run, tool_of=tool_of, risk_of=risk)


def _drive(run: Run, owner: str, held: leases.Held) -> str:
    # The budget check's first look: the profile's own budget, as the claim just read it.
    live = run.agent
    run.__dict__[loading.CLAIMED_PROFILE] = (live.pk, live.name, live.budget)
    # The run runs the profile version it started with, whatever was saved since.
    run.agent = versions.profile_for_run(run.agent, run.agent_version)
    journal = journal_for(run)
    agent = build_agent(run, journal)
    facts = run_context(run)
    context = ToolContext(
        call_id="", run_id=facts["run_id"], user=facts["user"], subject=facts["subject"]
    )
    if run.state is None:
        if run.forked_from_id is not None:  # the source's conversation up to the fork point
            state = forks.start_state(run, agent, facts)
        else:
            state = agent.start(run.task, context=facts)
        _tell_what_earlier_runs_did(run, state)
    else:
        state = LoopState.from_json(run.state)
        decisions = _decisions_for(run, state)
        if decisions:
            # The decision's event was stored when the person decided (with who and why);
            # the runtime's own copy of it is not stored twice. Nothing else to store: the
            # state with the decisions applied is stored by the next step (a worker that
            # dies before that reads the same decisions from the approvals again), so the
            # approved call starts without a transaction of its own first.
            events = [
                e for e in agent.decide(state, decisions) if not isinstance(e, ev.ApprovalDecided)
            ]
            if events:
                _persist(run, owner, state, events, None, journal)
    waiting: list[Waiting] = []  # steps done but not stored yet (runs.waiting)
    while True:
        if held.lost.is_set():
            raise LeaseLost
        if run.cancel_requested:  # read under the row lock by the previous _persist
            return _persist(run, owner, state, [], Cancelled(), journal, earlier=waiting)
        deltas = _DeltaPublisher(run.pk) if agent.config.stream else None
        dbpool.give_back()  # the step waits on the model or on tool calls
        step = agent.step(state, on_delta=deltas, tool_context=context, cancel=held.cancel.is_set)
        ended_ns = time.time_ns()  # the end of the step's spans
        outcome = step.outcome
        replies = [e for e in step.events if isinstance(e, ev.ModelCalled)]
        calls = [c["name"] for e in replies for c in e.tool_calls]
        if replies:
            crash_point("reply_received", calls)
        if may_wait(agent, state, step.events, outcome, journal, waiting):
            waiting.append(Waiting(_priced(run, step.events), ended_ns, calls))
            continue
        status = _persist(
            run,
            owner,
            state,
            step.events,
            outcome,
            journal,
            step_ended_ns=ended_ns,
            earlier=waiting,
        )
        calls = [name for part in waiting for name in part.calls] + calls
        waiting = []
        if calls:
            crash_point("reply_stored", calls)
        if outcome is not None:
            return status


def _tell_what_earlier_runs_did(run: Run, state: LoopState) -> None:
    """A new run on a ticket sees the actions earlier runs on it carried out, so it does
    not refund or write twice without knowing (a note in its system prompt)."""
    if run.ticket_id is None:
        return
    done = (
        ToolExecution.objects.filter(
            run__ticket_id=run.ticket_id,
            run__created_at__lt=run.created_at,
            status=ToolExecution.Status.SUCCEEDED,
        )
        .exclude(run=run)
        .order_by("started_at")
        .values_list("run_id", "tool", "arguments", "finished_at")
    )
    lines = []
    for run_id, tool, arguments, finished_at in done[:200]:
        if risk_of(tool, run.agent) == "low":
            continue
        when = finished_at.strftime("%Y-%m-%d %H:%M UTC") if finished_at else "?"
        args = json.dumps(arguments, sort_keys=True, ensure_ascii=False)[:500]
        lines.append(f"- run {run_id}, {when}: {tool} {args} (done)")
    if not lines:
        return
    note = (
        "Earlier runs on this ticket already carried out these actions. They happened; do "
        "not repeat one unless the facts show it is still needed, and say so if you do:\n"
        + "\n".join(lines[-50:])
    )
    first = state.messages[0] if state.messages else None
    if isinstance(first, SystemMessage):
        first.content = f"{first.content}\n\n{note}"
    else:
        state.messages.insert(0, SystemMessage(content=note))


def _decisions_for(run: Run, state: LoopState) -> list[Decision]:
    """Decided approvals whose calls the loop still waits for, as runtime decisions.

    The executor re-checks the hash of the arguments the approver saw: a mismatch is
    refused (fail closed) rather than executed."""
    waiting = {p.call_id for p in state.pending_approvals}
    decisions = []
    for approval in Approval.objects.filter(run=run, call_id__in=waiting).exclude(
        status=Approval.Status.PENDING
    ):
        if approval.status == Approval.Status.APPROVED:
            final_args = approval.edited_arguments or approval.arguments
            if arguments_hash(final_args) != approval.approved_hash:
                decisions.append(
                    Decision(
                        call_id=approval.call_id,
                        approved=False,
                        comment="Refused: the approved arguments changed after the decision.",
                    )
                )
                continue
            if approval.reason == "unknown_outcome":
                # A person confirmed the earlier attempt did not happen: allow one new try,
                # keeping the cleared record in the audit log.
                unknown = ToolExecution.objects.filter(
                    run=run, call_id=approval.call_id, status=ToolExecution.Status.UNKNOWN
                )
                for execution in unknown:
                    store.audit(
                        "unknown_execution_cleared",
                        actor=approval.decided_by,
                        run=run,
                        call_id=execution.call_id,
                        tool=execution.tool,
                        arguments=execution.arguments,
                        started_at=execution.started_at.isoformat(),
                    )
                unknown.delete()
            decisions.append(
                Decision(
                    call_id=approval.call_id,
                    approved=True,
                    comment=approval.comment,
                    arguments=approval.edited_arguments,
                )
            )
        else:
            decisions.append(
                Decision(
                    call_id=approval.call_id,
                    approved=False,
                    comment=approval.comment or f"Call {approval.status}.",
                )
            )
    return decisions


def _priced(run: Run, events: Iterable[ev.Event]) -> list[ev.Event]:
    """The events, each model call's with what it cost."""
    return [
        dataclasses.replace(e, cost_usd=cost_usd(str(e.model or run.model), e.tokens or {}))
        if isinstance(e, ev.ModelCalled)
        else e
        for e in events
    ]


def _persist(
    run: Run,
    owner: str,
    state: LoopState,
    events: Iterable[ev.Event],
    outcome: Any,
    journal: DbJournal,
    step_ended_ns: int | None = None,
    earlier: list[Waiting] | tuple[()] = (),
) -> str:
    """Store one step: events, loop state, usage and the outcome, if ours still, after
    the ``earlier`` steps that waited for it (``runs.waiting``), in the same transaction. A
    model call's event is stored with what it cost.

    The run's row is not read first when the worker knows what is in it (``last_seq``
    and usage, as its claim read them or its last step wrote them): the step's writes
    begin with a guard that locks the row and fails the transaction unless the row is
    still so, running, its lease ours and no cancel asked. The row is locked before the
    step's own writes, as with the read; one round trip fewer. When the guard fails
    (another writer's events, a cancel request, a lost lease) the step is stored the
    usual way, which reads the row and says why. A cancellation is always stored so."""
    events = _priced(run, events)
    known: _Written | None = run.__dict__.pop(_WRITTEN, None)
    if known is not None and not isinstance(outcome, Cancelled):
        deferred = journal.deferred()
        try:
            # A copy: opening approvals adds their events to the list it is given.
            return _store_step(
                run, owner, state, list(events), outcome, journal, step_ended_ns, known, earlier
            )
        except _NotAsWritten:
            journal.defer_again(deferred)  # the rolled-back step's reads are stored now
    return _store_step(run, owner, state, events, outcome, journal, step_ended_ns, None, earlier)


class _Written(NamedTuple):
    """What the run's row holds as this worker last saw it: read by its claim, or
    written by its last step."""

    last_seq: int
    usage: dict[str, Any]


_WRITTEN = "_agentweb_written"  # on the Run instance a worker drives


class _NotAsWritten(Exception):
    """The run's row is not as this worker left it: store the step the usual way."""


#: Locks the run's row and fails the transaction (division by zero, SQLSTATE 22012)
#: unless the row is as the worker wrote it, running, its lease ours, no cancel asked.
_GUARD = (
    "SELECT 1 / (SELECT count(*)::int FROM (SELECT 1 FROM runs_run WHERE id = %s "
    "AND status = %s AND lease_owner = %s AND last_seq = %s AND usage = %s "
    "AND NOT cancel_requested FOR UPDATE) AS ours)"
)
_GUARD_FAILED = "22012"


def _store_step(
    run: Run,
    owner: str,
    state: LoopState,
    events: list[ev.Event],
    outcome: Any,
    journal: DbJournal,
    step_ended_ns: int | None,
    known: _Written | None,
    earlier: list[Waiting] | tuple[()] = (),
) -> str:
    with transaction.atomic():
        quick = outcome is None and not settings.AGENTWEB_SYNC_STEPS
        # The step's writes go to PostgreSQL in one round trip (hooks of other apps send
        # their own statements as they run).
        batch = Batch()
        if known is None:
            locked = _lock_run(run.pk, without_flush_wait=quick)
            if locked.lease_owner != owner or locked.status != Run.Status.RUNNING:
                raise LeaseLost
            run.last_seq, run.cancel_requested = locked.last_seq, locked.cancel_requested
            usage_before = locked.usage
        else:
            if quick:
                batch.add(_NO_FLUSH_WAIT)
            usage_field = Run._meta.get_field("usage")
            assert isinstance(usage_field, models.Field)
            batch.add(
                _GUARD,
                [
                    run.pk,
                    Run.Status.RUNNING,
                    owner,
                    known.last_seq,
                    usage_field.get_db_prep_save(known.usage, connection),
                ],
            )
            run.last_seq, run.cancel_requested = known.last_seq, False
            usage_before = known.usage
        journal.save_deferred(batch)
        events = delegation.announce_children(run, events)
        update: dict[str, Any] = {"state": state.to_json()}
        if outcome is not None:
            # The keeper renews the lease of a run in progress; a step that leaves it
            # running does not touch the indexed lease column, so PostgreSQL can update
            # the row in place (a HOT update: no new entry in each of runs_run's indexes).
            update["lease_expires_at"] = timezone.now() + lifecycle.lease()
        every = [e for part in earlier for e in part.events] + events
        if any(isinstance(e, ev.ModelCalled) for e in every):
            update["usage"] = add_usage(usage_before, every)
        finished = [e.tool for e in every if isinstance(e, ev.ToolCallFinished)]
        # A step in the middle of a run writes nothing but its batch: the batch is its
        # transaction (no BEGIN and COMMIT round trips of their own). Its crash point
        # then comes before the batch: dying there loses the step, as it did after it.
        alone = quick and known is not None
        if alone:
            crash_point("step_committing", finished)
        if isinstance(outcome, Cancelled):
            _set(run, update)
            # The step's own events (a model reply that came in) are kept; the run's
            # cancellation is told once, by the life cycle as it closes the run.
            kept = [e.to_json() for e in events if not isinstance(e, ev.RunCancelled)]
            batch.send()
            waited = _append_waited(run, earlier, None)
            store.append_events(run, kept, step_ended_ns=step_ended_ns, earlier=waited)
            Run.objects.filter(pk=run.pk).update(**update)
            lifecycle.finish_cancelled(run, by="request")
        else:
            update.update(lifecycle.outcome_fields(run, outcome, events))
            _set(run, update)
            # A step that leaves the run running does not tell the lists its status again.
            changed = run.status != Run.Status.RUNNING
            waited = _append_waited(run, earlier, batch)
            store.append_events(
                run,
                [e.to_json() for e in events],
                save_seq=False,
                status_changed=changed,
                step_ended_ns=step_ended_ns,
                batch=batch,
                earlier=waited,
            )
            batch.update(Run, run.pk, {"last_seq": run.last_seq, **update})
            try:
                if not (alone and batch.send_as_transaction()):
                    batch.send()
            except DatabaseError as exc:
                if known is not None and getattr(exc.__cause__, "sqlstate", "") == _GUARD_FAILED:
                    raise _NotAsWritten from exc  # rolls the step's writes back
                raise
            if run.status in Run.FINAL:
                lifecycle.ended(run)
        if not alone:
            crash_point("step_committing", finished)
    if run.status == Run.Status.RUNNING:
        run.__dict__[_WRITTEN] = _Written(run.last_seq, update.get("usage", usage_before))
    return run.status


def _append_waited(
    run: Run, earlier: list[Waiting] | tuple[()], batch: Batch | None
) -> list[RunEvent]:
    """Append the events of the steps that waited, each step on its own (its spans end
    when it ended), telling nothing: the step's own append after them tells the last seq
    and gives the hooks all of the transaction's events at once. Their rows."""
    rows: list[RunEvent] = []
    for part in earlier:
        rows += store.append_events(
            run,
            [e.to_json() for e in part.events],
            save_seq=batch is None,
            status_changed=False,
            step_ended_ns=part.ended_ns,
            batch=batch,
            tell=False,
        )
    return rows


def add_usage(current: Mapping[str, Any], events: Iterable[ev.Event]) -> dict[str, Any]:
    """The run's usage after the model calls among ``events``."""
    usage = dict(current or {})
    for event in events:
        if not isinstance(event, ev.ModelCalled):
            continue
        tokens = event.tokens or {}
        usage["input_tokens"] = int(usage.get("input_tokens", 0)) + int(tokens.get("input", 0))
        usage["output_tokens"] = int(usage.get("output_tokens", 0)) + int(tokens.get("output", 0))
        usage["model_calls"] = int(usage.get("model_calls", 0)) + 1
        cost = float(usage.get("cost_usd", 0)) + float(event.cost or 0)
        usage["cost_usd"] = round(cost, 6)
    return usage


def _set(run: Run, fields: dict[str, Any]) -> None:
    for key, value in fields.items():
        setattr(run, key, value)


class _Locked(NamedTuple):
    status: str
    lease_owner: str
    last_seq: int
    cancel_requested: bool
    usage: dict[str, Any]


_LOCK_RUN = (
    "SELECT status, lease_owner, last_seq, cancel_requested, usage FROM runs_run "
    "WHERE id = %s FOR UPDATE"
)
_NO_FLUSH_WAIT = "SET LOCAL synchronous_commit = off"


def _lock_run(run_id: int, *, without_flush_wait: bool = False) -> _Locked:
    """The run's row, locked, as ``select_for_update().only(...).get()`` would read it; a
    statement of our own because building the ORM's query cost a step as much CPU time as
    PostgreSQL took to answer it.

    ``without_flush_wait``: this transaction's commit does not wait for the WAL to reach
    the disk. For a step in the middle of a run: a worker that dies loses nothing by it
    (the commit is done in PostgreSQL), only a crash of PostgreSQL itself may lose the last
    such steps (under a second), and the run is then redone from the last step on disk, as
    after a worker's crash. Tool side effects stay exactly-once: a non-idempotent call's
    journal row commits in a transaction of its own that waits for the flush, which also
    flushes every earlier step. Endings, pauses and everything outside the step loop still
    wait. The setting and the lock go in one round trip where the cursor binds parameters
    on the client (Django's default), which allows two statements in one execute."""
    with connection.cursor() as cursor:
        if without_flush_wait and isinstance(cursor.cursor, psycopg.ClientCursor):
            cursor.execute(f"{_NO_FLUSH_WAIT}; {_LOCK_RUN}", [run_id])
            cursor.nextset()  # past the SET's empty result
        else:
            if without_flush_wait:
                cursor.execute(_NO_FLUSH_WAIT)
            cursor.execute(_LOCK_RUN, [run_id])
        row = cursor.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"run {run_id} is gone")
    status, lease_owner, last_seq, cancel_requested, usage = row
    return _Locked(status, lease_owner, last_seq, cancel_requested, json.loads(usage or "{}"))


class _DeltaPublisher:
    """Streams model text to the page as it arrives: a preview, not a stored step.

    The stored ``model_called`` event that follows replaces it. Each message carries only
    the text since the previous one and its ``offset`` in the reply (a viewer's cost grows
    with the reply, not with its square). The first goes out once the call has taken
    ``interval``: a reply streamed faster than that is shown by its stored event, which
    follows within milliseconds, and a preview of it would be a message for nothing to
    every viewer (and a publish competing with the run's thread)."""

    def __init__(self, run_id: int, interval: float = 0.05) -> None:
        self.group = publish.run_group(run_id)
        self.interval = interval
        self.buffer: list[str] = []
        self.sent = 0  # characters already sent
        self.last = time.monotonic()  # the call's start

    def __call__(self, text: str) -> None:
        self.buffer.append(text)
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            new = "".join(self.buffer)
            self.buffer = []
            message = {"type": "run.delta", "offset": self.sent, "text": new}
            self.sent += len(new)
            publish.send_now(self.group, message)
