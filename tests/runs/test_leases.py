"""The lease keeper's advisory lock on a run: asked for by the run's thread without
waiting for the answer, held by PostgreSQL all the same, the answer read by whoever uses
the keeper's session next."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from agentweb.runs import leases, lifecycle
from tests.conftest import wait_for

RUN = 525252


@pytest.fixture
def starved(transactional_db) -> Iterator[leases.LeaseKeeper]:
    """A keeper whose beat never runs (a starved keeper thread): only the run's own
    thread and what it calls use the session."""
    keeper = leases.LeaseKeeper()
    never = threading.Event()
    beat = threading.Thread(target=never.wait, daemon=True)
    beat.start()
    keeper._thread, keeper._pid = beat, os.getpid()
    yield keeper
    never.set()
    keeper.close()


def lock_holders(key: int = RUN) -> list[int]:
    """Backend pids of the sessions granted the run lock of run ``key``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s",
            [lifecycle.RUN_LOCK_SPACE, lifecycle.run_lock_key(key)],
        )
        return [row[0] for row in cursor.fetchall()]


def other_session() -> psycopg.Connection:
    params = dict(connection.get_connection_params())
    params.pop("cursor_factory", None)
    return psycopg.connect(**params, autocommit=True)


def try_lock(session: psycopg.Connection, key: int = RUN) -> bool:
    row = session.execute(
        "SELECT pg_try_advisory_lock(%s, %s)",
        [lifecycle.RUN_LOCK_SPACE, lifecycle.run_lock_key(key)],
    ).fetchone()
    return bool(row and row[0])


def test_the_lock_is_taken_though_nobody_waits_for_the_answer(starved) -> None:
    held = starved.hold(RUN, "w:1")
    backend = starved._db.info.backend_pid
    assert starved._asked is held  # sent; its answer not read by anyone yet
    # PostgreSQL took the lock for the keeper's session all the same: another worker's
    # claim or sweep cannot take the run over.
    wait_for(lambda: lock_holders() == [backend], timeout=10)
    other = other_session()
    try:
        assert try_lock(other) is False
    finally:
        other.close()
    assert held.locked is False  # the answer is still on the socket
    starved.release("w:1")  # reads it first, then lets the lock go
    assert starved._asked is None
    assert lock_holders() == []
    assert held.locked is False and held.released


def test_the_next_statement_on_the_session_reads_the_answer_first(starved) -> None:
    held = starved.hold(RUN, "w:1")
    # The beat's next query gets its own rows, not the lock's answer before them.
    assert starved._query("SELECT 41 + 1", []) == [(42,)]
    assert held.locked is True
    assert starved._asked is None
    # Another run held meanwhile: the first run's answer, then the second's request.
    second = starved.hold(RUN + 1, "w:2")
    assert starved._asked is second
    starved._take_locks([second])
    assert second.locked is True
    assert sorted(lock_holders(RUN) + lock_holders(RUN + 1)) == [starved._db.info.backend_pid] * 2
    starved.release("w:1")
    starved.release("w:2")
    assert lock_holders(RUN) == [] and lock_holders(RUN + 1) == []


def test_a_lock_another_session_still_holds_is_asked_for_again(starved) -> None:
    other = other_session()
    try:
        assert try_lock(other) is True  # a worker that let the run go, not unlocked yet
        held = starved.hold(RUN, "w:1")
        assert starved._query("SELECT 1", []) == [(1,)]  # reads the answer first
        assert held.locked is False and starved._asked is None
        other.execute(
            "SELECT pg_advisory_unlock(%s, %s)",
            [lifecycle.RUN_LOCK_SPACE, lifecycle.run_lock_key(RUN)],
        )
        starved._take_locks([held])  # what the beat does with an unlocked run
        assert held.locked is True
        assert lock_holders() == [starved._db.info.backend_pid]
    finally:
        other.close()
    starved.release("w:1")
    assert lock_holders() == []


def test_a_session_lost_before_the_answer_is_dropped_and_the_lock_taken_again(starved) -> None:
    held = starved.hold(RUN, "w:1")
    backend = starved._db.info.backend_pid
    wait_for(lambda: lock_holders() == [backend], timeout=10)
    with connection.cursor() as cursor:  # PostgreSQL restarted under the keeper, say
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
    wait_for(lambda: lock_holders() == [], timeout=10)
    # The beat's next query finds the session gone (reading the answer, or sending its
    # own statement after it): the run is known unlocked, and the next beat locks it on
    # a new session.
    assert starved._query("SELECT 1", []) in (None, [(1,)])  # None: gone at its own turn
    assert held.locked is False
    starved._take_locks([held])
    assert held.locked is True
    assert starved._db.info.backend_pid != backend
    assert lock_holders() == [starved._db.info.backend_pid]
    starved.release("w:1")
    assert lock_holders() == []


def test_runs_that_follow_each_other_find_the_session_connected(transactional_db) -> None:
    keeper = leases.LeaseKeeper()
    keeper.idle_seconds = 30.0
    try:
        keeper.hold(RUN, "w:1")
        backend = keeper._db.info.backend_pid
        keeper.release("w:1")
        keeper._close_if_idle()  # the beat's look, a moment after the run let go
        assert keeper._db is not None
        held = keeper.hold(RUN + 1, "w:2")  # no new backend before the run goes on
        assert keeper._db.info.backend_pid == backend
        wait_for(lambda: held.locked, timeout=10)  # the beat read the answer
        keeper.release("w:2")
        keeper.idle_seconds = 0.0
        keeper._close_if_idle()  # idle long enough: a worker with nothing to do
        assert keeper._db is None
    finally:
        keeper.close()
