"""How a step's large values are stored (migration 0015): what the server is given to do
for each row must not change what it answers."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from django.db import connection

MIGRATION = importlib.import_module("agentweb.runs.migrations.0015_cheaper_step_writes")
LARGE_JSON_COLUMNS = MIGRATION.LARGE_JSON

pytestmark = pytest.mark.django_db


def _one(sql: str, params: list[Any] | None = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


def test_large_json_columns_are_compressed_with_lz4_where_the_server_has_it() -> None:
    has_lz4 = MIGRATION.has_lz4(connection)
    for table, column in LARGE_JSON_COLUMNS:
        method = _one(
            "SELECT attcompression FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = %s",
            [table, column],
        )
        # 'l': lz4; '': the server's default (pglz), as on a server built without lz4.
        assert method == ("l" if has_lz4 else ""), (table, column)


def test_a_large_state_is_stored_compressed_and_read_back_whole(people: Any, enqueued: Any) -> None:
    from agentweb.runs import actions
    from agentweb.runs.models import Run

    run = actions.do_create_run(user=people["operator"], task="Check order A1")
    state = {"messages": [{"role": "user", "content": f"line {i} " * 20} for i in range(200)]}
    Run.objects.filter(pk=run.pk).update(state=state)
    assert Run.objects.get(pk=run.pk).state == state
    method = _one("SELECT pg_column_compression(state) FROM runs_run WHERE id = %s", [run.pk])
    has_lz4 = MIGRATION.has_lz4(connection)
    assert method == ("lz4" if has_lz4 else "pglz")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"order_id": " A1\t", "amount": 3}, {"order_id": "a1", "amount": "*"}),
        ({"order_id": "Straße-1"}, {"order_id": "*"}),  # not ASCII: left to Python
        ({"order_id": "X" * 201}, {"order_id": "*"}),
        ({}, {}),
        (["not", "an", "object"], {}),
    ],
)
def test_the_group_keys_function_answers_as_before(arguments: Any, expected: Any) -> None:
    """PL/pgSQL now (one plan per session, not one per row written); same answers."""
    language = _one(
        "SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
        "WHERE p.proname = 'runs_group_keys'"
    )
    assert language == "plpgsql"
    got = _one("SELECT runs_group_keys(%s::jsonb)", [json.dumps(arguments)])
    assert (json.loads(got) if isinstance(got, str) else got) == expected
    assert _one("SELECT runs_group_keys(NULL) IS NULL")  # STRICT, as before
