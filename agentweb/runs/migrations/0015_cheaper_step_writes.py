"""Cheaper writes for every step a run stores (issue 30).

- ``runs_group_keys`` in PL/pgSQL, same body and result. PostgreSQL plans an SQL
  function that it cannot inline again at every call, and the GIN index on tool
  executions calls it for each row written: one plan per tool record. PL/pgSQL keeps
  the plan for the session. Inserting a tool record took 0.19 ms and now takes 0.08 ms
  on the server.
- The large JSON columns (a run's state, the events' data, tool arguments and
  results) are compressed with lz4 instead of pglz when the server has lz4. Only new
  values are affected: PostgreSQL reads both. Without lz4 (the embedded server of
  ``make run``), nothing changes.
"""

import importlib
from typing import Any

from django.db import migrations

#: The SQL function as migration 0008 made it (what this migration goes back to).
GROUP_KEYS_SQL = importlib.import_module("agentweb.runs.migrations.0008_sum_per_keys").GROUP_KEYS


def _in_plpgsql(function_sql: str) -> str:
    """The SQL function 0008 made, as a PL/pgSQL function returning its one SELECT."""
    head, body, tail = function_sql.split("$fn$")
    assert "LANGUAGE sql" in head
    head = head.replace("LANGUAGE sql", "LANGUAGE plpgsql")
    return f"{head}$fn$\nBEGIN\n    RETURN ({body.strip()});\nEND\n$fn${tail}"


GROUP_KEYS_PLPGSQL = _in_plpgsql(GROUP_KEYS_SQL)

#: (table, column) of the values compressed with lz4 from now on, when the server can.
LARGE_JSON = [
    ("runs_run", "state"),
    ("runs_runevent", "data"),
    ("runs_toolexecution", "arguments"),
    ("runs_toolexecution", "result"),
]


def has_lz4(connection: Any) -> bool:
    """Whether the server behind ``connection`` can compress TOAST values with lz4."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _compress_with(method: str) -> Any:
    def apply(apps: Any, schema_editor: Any) -> None:
        if not has_lz4(schema_editor.connection):
            return
        quote = schema_editor.quote_name
        for table, column in LARGE_JSON:
            schema_editor.execute(
                f"ALTER TABLE {quote(table)} ALTER COLUMN {quote(column)} SET COMPRESSION {method}"
            )

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0014_suites"),
    ]

    operations = [
        migrations.RunSQL(GROUP_KEYS_PLPGSQL, GROUP_KEYS_SQL),
        migrations.RunPython(_compress_with("lz4"), _compress_with("pglz")),
    ]
