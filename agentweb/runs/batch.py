"""Statements of one transaction sent to PostgreSQL together, in one round trip.

A step's transaction writes its tool executions, its events and the run's row, and none
of those statements needs another's answer. Django sends each on its own and waits for
it; here they are collected and sent as one string, which the default cursor allows
(it binds parameters on the client, so several statements may share one ``execute``).
With a cursor that binds on the server they are sent one by one, as before.

Values go through each model field's ``get_db_prep_save``, as the ORM's own INSERT and
UPDATE send them (JSON as jsonb with the field's encoder, aware datetimes).

``send_as_transaction``: when the batch is all its transaction does, the string is the
transaction. PostgreSQL runs the statements of one simple query as one implicit
transaction (all of them or none), so psycopg's BEGIN before the batch and the COMMIT
after it, a round trip each, are not sent.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections, models


class Batch:
    def __init__(self) -> None:
        self._statements: list[tuple[str, list[Any]]] = []

    def __len__(self) -> int:
        return len(self._statements)

    def add(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._statements.append((sql, list(params)))

    def insert(
        self,
        model: type[models.Model],
        objs: Iterable[models.Model],
        *,
        ignore_conflicts: bool = False,
    ) -> None:
        """``model.objects.bulk_create(objs, ignore_conflicts=...)`` without the answer:
        the rows get no primary key back."""
        rows = list(objs)
        if not rows:
            return
        conn = connections[DEFAULT_DB_ALIAS]  # once, not through the proxy per value
        fields, head, one = _insert_parts(model)
        params: list[Any] = []
        for obj in rows:
            for field in fields:
                value = field.pre_save(obj, add=True)  # auto_now_add and the like
                params.append(field.get_db_prep_save(value, conn))
        sql = head + ", ".join([one] * len(rows))
        if ignore_conflicts:
            sql += " ON CONFLICT DO NOTHING"
        self.add(sql, params)

    def update(self, model: type[models.Model], pk: Any, values: dict[str, Any]) -> None:
        """``model.objects.filter(pk=pk).update(**values)`` for plain fields."""
        if not values:
            return
        conn = connections[DEFAULT_DB_ALIAS]
        meta = model._meta
        quote = conn.ops.quote_name
        sets, params = [], []
        for name, value in values.items():
            field = meta.get_field(name)
            assert isinstance(field, models.Field) and field.concrete, name
            sets.append(f"{quote(field.column)} = %s")
            params.append(field.get_db_prep_save(value, conn))
        assert meta.pk is not None
        self.add(
            f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)} "  # noqa: S608
            f"WHERE {quote(meta.pk.column)} = %s",  # names and placeholders
            [*params, pk],
        )

    def send(self) -> None:
        """Run every statement collected, in order, and forget them."""
        statements, self._statements = self._statements, []
        if not statements:
            return
        with connection.cursor() as cursor:
            if len(statements) > 1 and isinstance(cursor.cursor, psycopg.ClientCursor):
                cursor.execute(_bound(cursor.cursor, statements))
                return
            for sql, params in statements:
                cursor.execute(sql, params)

    def send_as_transaction(self) -> bool:
        """Send every statement as the whole of the caller's transaction, committed by
        PostgreSQL as the string ends; False (nothing sent) where that cannot be done:
        the transaction has begun on the server (something ran in it already), it is
        inside another (a savepoint), the cursor binds on the server, or one statement.

        The caller's ``atomic`` block must execute nothing after this: its own commit
        then finds nothing to commit, and its on-commit callbacks run as usual. A
        failing statement rolls back all of them (PostgreSQL ends the implicit
        transaction) and raises, as ``send`` does."""
        raw = connection.connection
        if (
            len(self._statements) < 2
            or raw is None
            or len(connection.atomic_blocks) != 1  # our own atomic block, outermost
            or connection.savepoint_ids
            or raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        ):
            return False
        with connection.cursor() as cursor:
            if not isinstance(cursor.cursor, psycopg.ClientCursor):
                return False
            statements, self._statements = self._statements, []
            raw.autocommit = True  # no BEGIN first: the string is its own transaction
            try:
                cursor.execute(_bound(cursor.cursor, statements))
            finally:
                raw.autocommit = False  # idle again, committed or rolled back
        return True


def _bound(cursor: psycopg.ClientCursor[Any], statements: list[tuple[str, list[Any]]]) -> str:
    """The statements as one string, each with its parameters bound as the cursor binds
    them, to execute without parameters. Bound one by one: psycopg keeps the parsed form
    of a short statement with few parameters (each of ours), while the parameters of the
    whole string, one long statement, were parsed again on every step (about 1 ms of CPU
    time for a step that stores three before it)."""
    return "; ".join(cursor.mogrify(sql, params) for sql, params in statements)


@functools.cache
def _insert_parts(model: type[models.Model]) -> tuple[list[Any], str, str]:
    """A model's inserted fields, its ``INSERT INTO t (columns) VALUES `` head and one
    row's placeholders: the same for every step."""
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    fields = [f for f in model._meta.concrete_fields if not isinstance(f, models.AutoField)]
    columns = ", ".join(quote(f.column) for f in fields)
    head = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES "  # noqa: S608
    return fields, head, "(" + ", ".join(["%s"] * len(fields)) + ")"
