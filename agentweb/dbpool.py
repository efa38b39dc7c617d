"""Giving a pooled database connection back while a thread waits on something else.

With the pool (``DB_POOL_SIZE``) a run's thread that held its connection through model
calls and tool calls would keep one of the process's few connections idle, and enough
such threads would leave none for the tool calls they wait for. So a thread gives its
connection back before it waits, and borrows one again (from the pool: no new
PostgreSQL connection) when it next queries. Without a pool this does nothing: the
thread keeps its connection, as Django does.
"""

from __future__ import annotations

from django.db import connection


def pooled() -> bool:
    """Whether this process's connections come from a pool."""
    return getattr(connection, "pool", None) is not None


def give_back() -> None:
    """Return this thread's connection to the pool, unless inside a transaction."""
    if connection.connection is not None and not connection.in_atomic_block and pooled():
        connection.close()


def tidy_tool_thread() -> None:
    """Around each tool call in the runtime's long-lived pool threads: drop a broken or
    expired connection, and after the call hand it back (to the pool, or closed with
    CONN_MAX_AGE 0), so any tool that touches the ORM, ours or a company's, leaves no
    connection held by an idle thread."""
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()
