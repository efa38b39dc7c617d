"""``Batch.send_as_transaction``: the batch's string is the whole transaction (no BEGIN
and COMMIT of psycopg's own), all of it or none of it, and only where that is so."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from agentweb.runs.batch import Batch
from agentweb.runs.models import Run, RunEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(people: Any, enqueued: Any) -> Run:
    from agentweb.runs import actions

    return actions.do_create_run(user=people["operator"], task="Check order A1")


def _event(run: Run, seq: int) -> tuple[str, list[Any]]:
    return (
        "INSERT INTO runs_runevent (run_id, seq, type, data, at) "
        "VALUES (%s, %s, 'run_started', '{}'::jsonb, now())",
        [run.pk, seq],
    )


def _status() -> str:
    raw = connection.connection
    assert raw is not None
    return raw.info.transaction_status.name


def test_the_batch_commits_as_its_string_ends(run: Run) -> None:
    batch = Batch()
    batch.add(*_event(run, 1))
    batch.add("UPDATE runs_run SET last_seq = 1 WHERE id = %s", [run.pk])
    committed: list[bool] = []
    with transaction.atomic():
        transaction.on_commit(lambda: committed.append(True))
        connection.ensure_connection()
        assert batch.send_as_transaction()
        assert _status() == "IDLE"  # PostgreSQL committed it: nothing left to commit
        assert not committed  # the on-commit callbacks still wait for the block's end
    assert committed == [True]
    assert len(batch) == 0
    assert list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == [
        1
    ]
    assert Run.objects.get(pk=run.pk).last_seq == 1
    assert connection.get_autocommit()


def test_a_failing_statement_rolls_back_the_ones_before_it(run: Run) -> None:
    batch = Batch()
    batch.add(*_event(run, 1))
    batch.add("UPDATE runs_run SET last_seq = 1 WHERE id = %s", [run.pk])
    batch.add("SELECT 1 / 0")
    with pytest.raises(DatabaseError), transaction.atomic():
        connection.ensure_connection()
        batch.send_as_transaction()
    assert not RunEvent.objects.filter(run=run).exists()
    assert Run.objects.get(pk=run.pk).last_seq == 0
    # the connection is usable, in a transaction of its own again
    with transaction.atomic():
        RunEvent.objects.create(run=run, seq=1, type="run_started", data={})
        assert _status() == "INTRANS"
    assert RunEvent.objects.filter(run=run).count() == 1


def test_not_alone_where_the_transaction_has_begun_or_is_inside_another(run: Run) -> None:
    def two() -> Batch:
        batch = Batch()
        batch.add(*_event(run, 1))
        batch.add("UPDATE runs_run SET last_seq = 1 WHERE id = %s", [run.pk])
        return batch

    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(task="Check order A2")  # the transaction began
        batch = two()
        assert not batch.send_as_transaction()
        assert len(batch) == 2  # nothing was sent: the caller sends it as usual
        batch.send()
        with transaction.atomic():  # a savepoint
            inner = Batch()
            inner.add(*_event(run, 2))
            inner.add("UPDATE runs_run SET last_seq = 2 WHERE id = %s", [run.pk])
            assert not inner.send_as_transaction()
            inner.send()
    assert list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == [
        1,
        2,
    ]
    single = Batch()
    single.add(*_event(run, 3))
    with transaction.atomic():
        connection.ensure_connection()
        assert not single.send_as_transaction()  # one statement: nothing to save
        single.send()
