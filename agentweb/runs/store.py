"""A run's history as it is written: its events, with the run's next seqs, and audit lines.

Events are stored in the caller's transaction, which holds the run's row lock. Hooks of
other apps see each batch in that transaction (``on_events_stored``: what they write
commits with the events). After commit it is told to the run's page and the run lists
(``publish``), to the pages of the runs whose tree shows the run, and, as a
``hooks.StoredStep``, to the step hooks (observability's spans and metrics).
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from agentweb.runs import hooks, publish
from agentweb.runs.batch import Batch
from agentweb.runs.models import AgentProfile, Approval, AuditEntry, Run, RunEvent

#: ``hook(run, rows)`` for every batch of stored events, in the transaction that stores
#: them (so what a hook writes commits with the events): ``on_events_stored``.
StoredHook = Callable[[Run, list[RunEvent]], None]
_stored_hooks: list[StoredHook] = []


_batch: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("step_batch", default=None)


def step_batch() -> Batch | None:
    """For an ``on_events_stored`` hook: the batch of the step being stored, if the step
    sends its writes as one (``runs.batch``); a hook's write that needs no answer may
    join it instead of a round trip of its own. None: execute as usual."""
    return _batch.get()


def on_events_stored(hook: StoredHook) -> None:
    """Call ``hook(run, rows)`` with each batch of events as it is stored (other apps react
    to what runs do: ``agentweb.notify`` tells people of approvals and runs' ends)."""
    if hook not in _stored_hooks:
        _stored_hooks.append(hook)


def append_events(
    run: Run,
    events: Iterable[Mapping[str, Any]],
    *,
    save_seq: bool = True,
    status_changed: bool = True,
    step_ended_ns: int | None = None,
    batch: Batch | None = None,
    tell: bool = True,
    earlier: Sequence[RunEvent] | None = None,
    approval_times: dict[str, tuple[datetime, datetime | None]] | None = None,
) -> list[RunEvent]:
    """Store events with the next seqs of ``run``. Call inside a transaction that holds
    the run's row lock (``select_for_update``), so seqs never collide. Publishes on commit
    (the run's status to the run lists too, unless ``status_changed`` is False).
    With ``save_seq=False`` the caller writes ``run.last_seq`` in its own UPDATE.
    ``step_ended_ns``: when the runtime returned the step these events are of (its
    spans end there; default: now). With a ``batch`` the INSERT joins it (sent by the
    caller, in the same transaction, before anything reads the events back) and the rows
    get no primary key. ``tell=False``: nothing is published for these events (the caller
    stores more of the run's events in this transaction, and those tell the last seq).
    ``earlier``: the rows of this transaction's earlier appends made with ``tell=False``,
    which the ``on_events_stored`` hooks see here, before these (one hook call for the
    whole transaction: the budgets' ledger then adds its calls in one statement).
    ``approval_times``: what the after-commit readers would read of the approvals these
    events decided (``StepFacts.approval_times``), known to the caller."""
    rows = []
    seq = run.last_seq
    for event in events:
        seq += 1
        rows.append(RunEvent(run=run, seq=seq, type=event["type"], data=event.get("data") or {}))
    stored = [*(earlier or ()), *rows]  # what this transaction stored, when it tells
    if not (rows or (tell and stored)):
        return []
    if rows:
        if batch is None:
            _insert_events(rows)
        else:
            batch.add(*_events_insert(rows, returning=False))
        run.last_seq = seq
        if save_seq:
            Run.objects.filter(pk=run.pk).update(last_seq=seq)
    if tell:  # the last append of its transaction: one wake-up, one call of each hook
        publish.run_changed_on_commit(run.pk, seq, run.status if status_changed else None)
        token = _batch.set(batch)
        try:
            for hook in _stored_hooks:
                hook(run, stored)
        finally:
            _batch.reset(token)
    if hooks.wants(r.type for r in rows):  # spans and metrics, after commit
        step = _stored_step(run, rows, step_ended_ns, approval_times)
        transaction.on_commit(functools.partial(hooks.step_stored, step))
    if run.parent_id is not None or any(r.type.startswith("subtask_") for r in rows):
        publish.tree_changed_on_commit(run.pk, run.parent_id, run.root_id, (r.type for r in rows))
    return rows


def _stored_step(
    run: Run,
    rows: list[RunEvent],
    ended_ns: int | None,
    approval_times: dict[str, tuple[datetime, datetime | None]] | None = None,
) -> hooks.StoredStep:
    agent = run.agent if Run.agent.is_cached(run) else None
    step = hooks.StoredStep(
        run_id=run.pk,
        agent_id=run.agent_id,
        agent_name=agent.name if agent is not None else None,
        model=run.model,
        trace_id=run.trace_id,
        span_id=run.trace_span_id,
        parent_span_id=run.trace_parent_span_id,
        started_at=run.started_at,
        created_at=run.created_at,
        usage=dict(run.usage or {}),
        failure_reason=run.failure_reason,
        events=[(row.type, row.data) for row in rows],
        state=run.state,
        facts=_FACTS,
        _approvals=approval_times,  # None: read after commit if a reader asks
    )
    if ended_ns is not None:
        step.stored_ns = ended_ns
    return step


class _Facts:
    """What a step's reader may ask after commit, read then (``hooks.StepFacts``)."""

    def agent_name(self, agent_id: int) -> str:
        name = AgentProfile.objects.filter(pk=agent_id).values_list("name", flat=True)
        return str(name.first() or "")

    def approval_times(
        self, run_id: int, call_ids: list[str]
    ) -> dict[str, tuple[datetime, datetime | None]]:
        rows = Approval.objects.filter(run_id=run_id, call_id__in=call_ids)
        return {
            call_id: (requested, decided)
            for call_id, requested, decided in rows.values_list(
                "call_id", "requested_at", "decided_at"
            )
        }


_FACTS = _Facts()


def _insert_events(rows: list[RunEvent]) -> None:
    """``bulk_create(rows)`` as one INSERT ... VALUES. Django sends two or more rows as an
    UNNEST of arrays, and quoting a jsonb[] array escapes every quote of every event's
    JSON one by one: that cost a step more CPU time than the rest of its SQL."""
    with connection.cursor() as cursor:
        cursor.execute(*_events_insert(rows, returning=True))
        for row, (pk,) in zip(rows, cursor.fetchall(), strict=True):  # as bulk_create does
            row.pk, row._state.adding = pk, False


def _events_insert(rows: list[RunEvent], *, returning: bool) -> tuple[str, list[Any]]:
    now = timezone.now()  # RunEvent.at is auto_now_add
    params: list[Any] = []
    for row in rows:
        row.at = now
        data = connection.ops.adapt_json_value(row.data, DjangoJSONEncoder)  # as JSONField
        params += [row.run_id, row.seq, row.type, data, now]
    placeholders = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
    sql = "INSERT INTO runs_runevent (run_id, seq, type, data, at) VALUES " + placeholders  # noqa: S608 - placeholders only
    return (sql + " RETURNING id" if returning else sql), params


def audit(action: str, *, actor: User | None, run: Run | None, **data: Any) -> None:
    AuditEntry.objects.create(action=action, actor=actor, run=run, data=data)
