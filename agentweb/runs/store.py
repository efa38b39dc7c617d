"""A run's history as it is written: its events, with the run's next seqs, and audit lines.

Events are stored in the caller's transaction, which holds the run's row lock, and told
after it commits: to the run's page and the run lists (``publish``), to the pages of the
runs whose tree shows the run, and to observability (spans and metrics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.contrib.auth.models import User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.utils import timezone

from agentweb.observability.steps import events_stored as observe_stored
from agentweb.runs import publish
from agentweb.runs.models import AuditEntry, Run, RunEvent

#: ``hook(run, rows)`` for every batch of stored events, in the transaction that stores
#: them (so what a hook writes commits with the events): ``on_events_stored``.
StoredHook = Callable[[Run, list[RunEvent]], None]
_stored_hooks: list[StoredHook] = []


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
) -> list[RunEvent]:
    """Store events with the next seqs of ``run``. Call inside a transaction that holds
    the run's row lock (``select_for_update``), so seqs never collide. Publishes on commit
    (the run's status to the run lists too, unless ``status_changed`` is False).
    With ``save_seq=False`` the caller writes ``run.last_seq`` in its own UPDATE."""
    rows = []
    seq = run.last_seq
    for event in events:
        seq += 1
        rows.append(RunEvent(run=run, seq=seq, type=event["type"], data=event.get("data") or {}))
    if not rows:
        return []
    _insert_events(rows)
    run.last_seq = seq
    if save_seq:
        Run.objects.filter(pk=run.pk).update(last_seq=seq)
    publish.run_changed_on_commit(run.pk, seq, run.status if status_changed else None)
    observe_stored(run, rows)  # spans and metrics, after commit
    for hook in _stored_hooks:
        hook(run, rows)
    if run.parent_id is not None or any(r.type.startswith("subtask_") for r in rows):
        publish.tree_changed_on_commit(run.pk, run.parent_id, run.root_id, (r.type for r in rows))
    return rows


def _insert_events(rows: list[RunEvent]) -> None:
    """``bulk_create(rows)`` as one INSERT ... VALUES. Django sends two or more rows as an
    UNNEST of arrays, and quoting a jsonb[] array escapes every quote of every event's
    JSON one by one: that cost a step more CPU time than the rest of its SQL."""
    now = timezone.now()  # RunEvent.at is auto_now_add
    params: list[Any] = []
    for row in rows:
        row.at = now
        data = connection.ops.adapt_json_value(row.data, DjangoJSONEncoder)  # as JSONField
        params += [row.run_id, row.seq, row.type, data, now]
    placeholders = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runs_runevent (run_id, seq, type, data, at) VALUES "  # noqa: S608
            + placeholders  # placeholders only
            + " RETURNING id",
            params,
        )
        for row, (pk,) in zip(rows, cursor.fetchall(), strict=True):  # as bulk_create does
            row.pk, row._state.adding = pk, False


def audit(action: str, *, actor: User | None, run: Run | None, **data: Any) -> None:
    AuditEntry.objects.create(action=action, actor=actor, run=run, data=data)
