"""The check a pooled PostgreSQL connection passes as a thread borrows it.

psycopg_pool's own check (``ConnectionPool.check_connection``, what Django installs with
``CONN_HEALTH_CHECKS``) sends an empty query and waits for the answer: one round trip per
borrow, and a run's step borrows a connection several times (the run's thread after each
model call, each tool thread). A connection resting in the pool has nothing to read: the
server speaks only when asked. So when its socket is quiet the connection is taken as it
is, and only a socket with something to read (the server closed it: a restart, an admin's
pg_terminate_backend, an idle timeout; or a notice) gets the real check, which throws
out a dead connection so that the pool makes a new one.

Django builds the pool itself and installs psycopg_pool's check when
``CONN_HEALTH_CHECKS`` is on; our database backend (``agentweb.pgbackend``) puts this one
in its place.

What a quiet socket cannot tell: a server that vanished without closing (a host that
lost power, a cut network). The first query then fails as it would after a passed check a
moment earlier, and the caller's error handling applies (503 on the API, a retried step
in a worker).
"""

from __future__ import annotations

import select
from typing import Any


def readable(fd: int) -> bool:
    """Whether ``fd`` has something to read (or is closed) right now, without waiting."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def check_connection(conn: Any) -> None:
    """psycopg_pool's ``check``: raise when ``conn`` is not fit to lend. No round trip
    unless the server has said something since the connection was given back."""
    if conn.closed or conn.broken:
        raise ConnectionError("the pooled connection is closed")
    if readable(conn.pgconn.socket):
        from psycopg_pool import ConnectionPool  # only installed where a pool is used

        ConnectionPool.check_connection(conn)
