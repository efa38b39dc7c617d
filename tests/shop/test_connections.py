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
