"""Tool calls run in long-lived pool threads: a thread holds no PostgreSQL connection once
its call is done, and with the connection pool (DB_POOL_SIZE) the next call borrows the
same connection instead of opening one."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
from django.conf import settings
from django.db import connection

from agentweb import dbpool
from agentweb.env import database_pool, env_int
from agentweb.runtime.execution import ToolPool
from tools.ticket.read import get_order


def test_the_default_keeps_no_connection_per_thread():
    assert env_int("DB_CONN_MAX_AGE", 0, env={}) == 0  # the default the settings use
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == 0


def test_the_pool_options_follow_the_settings():
    pool = database_pool(10, 0, installed=True)
    assert pool is not None and pool["max_size"] == 10
    assert pool["min_size"] == 0  # an idle process holds no connection
    assert database_pool(0, 0, installed=True) is None  # DB_POOL_SIZE=0: no pool
    # A connection kept per thread (DB_CONN_MAX_AGE) and a pool do not go together.
    assert database_pool(10, 60, installed=True) is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert database_pool(10, 0, installed=False) is None
    assert "psycopg_pool is not installed" in str(caught[0].message)


def in_a_tool_thread(fn: Callable[[], object]) -> object:
    """Run ``fn`` as a tool call runs: in a thread of its own pool, with the hooks the
    Django side registers around every call."""
    return ToolPool(max_workers=1).submit(fn).result(10)


def test_a_tool_call_in_a_pool_thread_leaves_no_connection_held(transactional_db, shop):
    pool = ToolPool(max_workers=1)  # one thread: the probe runs where the call ran
    assert pool.submit(lambda: get_order.fn(order_id="A1001")).result(10)["order_id"] == "A1001"
    assert pool.submit(lambda: connection.connection).result(10) is None


def test_a_company_tool_that_uses_the_orm_needs_no_decorator(transactional_db, shop):
    """A tool written against the ORM with nothing of ours around it still hands its
    thread's connection back after the call."""
    from django.contrib.auth import get_user_model

    def count_people() -> int:  # what a company's own tool might do
        return get_user_model().objects.count()

    pool = ToolPool(max_workers=1)
    assert pool.submit(count_people).result(10) >= 0
    assert pool.submit(lambda: connection.connection).result(10) is None


def test_tool_calls_borrow_a_pooled_connection_instead_of_opening_one(transactional_db, shop):
    if not dbpool.pooled():
        pytest.skip("psycopg_pool is not installed: no pool to borrow from")
    pool = connection.pool

    def call() -> None:
        assert get_order.fn(order_id="A1001")["order_id"] == "A1001"

    in_a_tool_thread(call)  # may open the connection the others then borrow
    opened = pool.get_stats()["connections_num"]
    for _ in range(5):
        in_a_tool_thread(call)  # a new thread each time, as the tool pool may use
    assert pool.get_stats()["connections_num"] == opened


def _borrow_and_ask(sql: str) -> object:
    """One query on a connection borrowed from the pool, then given back."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchone()[0]
    finally:
        connection.close()  # back to the pool


def test_a_borrowed_connection_is_checked_without_a_round_trip(transactional_db, monkeypatch):
    """The pool's check (agentweb.pgcheck, installed by agentweb.pgbackend) asks the server
    nothing about a connection whose socket is quiet: psycopg_pool's own check (an empty
    query, one round trip) is not called for any of several borrows."""
    if not dbpool.pooled():
        pytest.skip("psycopg_pool is not installed: no pool to borrow from")
    from psycopg_pool import ConnectionPool

    from agentweb import pgcheck

    assert connection.pool._check is pgcheck.check_connection
    _borrow_and_ask("SELECT 1")  # the pool has a connection to lend
    checks, round_trips = [], []
    real = ConnectionPool.check_connection

    def counted_round_trip(conn: object) -> None:
        round_trips.append(conn)
        real(conn)

    quiet_check = pgcheck.check_connection

    def counted_check(conn: object) -> None:
        checks.append(conn)
        quiet_check(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted_round_trip))
    monkeypatch.setattr(pgcheck, "check_connection", counted_check)  # the backend installs it
    for _ in range(5):
        assert _borrow_and_ask("SELECT 1") == 1
    assert len(checks) == 5 and round_trips == []


def test_a_pooled_connection_whose_backend_was_killed_is_replaced_on_borrow(transactional_db):
    """A server that closed a resting connection (here: pg_terminate_backend from another
    session, as a restart or an idle timeout would) makes its socket readable; the check
    then asks the server, finds it gone, and the pool lends a new connection: the query
    succeeds instead of failing with 'server closed the connection'."""
    if not dbpool.pooled():
        pytest.skip("psycopg_pool is not installed: no pool to borrow from")
    import time

    import psycopg

    pid = _borrow_and_ask("SELECT pg_backend_pid()")
    params = dict(connection.get_connection_params())
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0] is True
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the backend exits, and closes its socket
            gone = other.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            if gone.fetchone()[0] == 0:
                break
            time.sleep(0.05)
    new_pid = _borrow_and_ask("SELECT pg_backend_pid()")
    assert new_pid != pid
    assert _borrow_and_ask("SELECT 1") == 1
