"""Tool calls run in long-lived pool threads: with the default CONN_MAX_AGE of 0 a
thread holds no PostgreSQL connection once its call is done."""

from __future__ import annotations

import threading

from django.conf import settings
from django.db import connection

from tools.ticket.read import get_order


def test_the_default_keeps_no_connection_between_requests():
    from agentweb.env import env_int

    assert env_int("DB_CONN_MAX_AGE", 0, env={}) == 0  # the default the settings use
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == 0


def test_a_tool_call_in_a_pool_thread_leaves_no_connection_open(transactional_db, shop):
    held: list[object] = []

    def work() -> None:
        assert get_order.fn(order_id="A1001")["order_id"] == "A1001"
        held.append(connection.connection)  # this thread's connection after the call
        connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert held == [None]
