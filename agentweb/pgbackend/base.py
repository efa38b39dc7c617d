"""Django's PostgreSQL backend (``ENGINE`` ``agentweb.pgbackend``), changed in one thing:
where Django's pool would check each borrowed connection with a round trip
(``CONN_HEALTH_CHECKS``), it checks it with ``agentweb.pgcheck`` (a round trip only when
the connection's socket has something to read). Everything else is Django's."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

from agentweb import pgcheck


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool = super().pool  # type: ignore[misc]  # not in django-stubs
        # psycopg_pool 3.3 keeps the check as ``_check`` and asks it on every borrow.
        if pool is not None and getattr(pool, "_check", None) not in (
            None,
            pgcheck.check_connection,
        ):
            pool._check = pgcheck.check_connection
        return pool
