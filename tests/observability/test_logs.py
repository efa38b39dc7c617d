"""JSON log lines: fields, one line per record, run fields into tool threads."""

from __future__ import annotations

import json
import logging

from agentweb.observability.logs import JsonFormatter, RunContextFilter, process_kind, run_scope
from agentweb.runtime.execution import ToolPool


def record(msg: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("agentweb.test", logging.INFO, __file__, 1, msg, None, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def line(rec: logging.LogRecord) -> dict[str, object]:
    RunContextFilter().filter(rec)
    text = JsonFormatter().format(rec)
    assert "\n" not in text
    return json.loads(text)


def test_it_writes_one_object_with_the_fields() -> None:
    out = line(record("hello %s", status="ok"))
    assert out["message"] == "hello %s"
    assert out["level"] == "INFO" and out["logger"] == "agentweb.test"
    assert out["process"] in {"web", "worker", "beat"}
    assert out["status"] == "ok"
    assert "run_id" not in out and "trace_id" not in out


def test_an_exception_stays_on_one_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, "", 0, "failed", None, sys.exc_info())
    out = line(rec)
    assert "ValueError: bad\nvalue" in str(out["exc"])


def test_inside_a_run_every_line_has_its_ids_also_from_tool_threads() -> None:
    pool = ToolPool(max_workers=2, name="test-tool")
    with run_scope(7, "ab" * 16):
        assert line(record("in run"))["run_id"] == 7
        seen = pool.submit(lambda: line(record("from a tool thread"))).result(timeout=5)
    assert seen["run_id"] == 7 and seen["trace_id"] == "ab" * 16
    after = pool.submit(lambda: line(record("later"))).result(timeout=5)
    assert "run_id" not in after  # the pool thread does not keep an old run's fields
    assert "run_id" not in line(record("outside"))


def test_the_process_kind_comes_from_the_command_line(monkeypatch) -> None:
    monkeypatch.delenv("AGENTWEB_PROCESS", raising=False)
    assert process_kind(["/venv/bin/celery", "-A", "agentweb", "worker"]) == "worker"
    assert process_kind(["/x/site-packages/celery/__main__.py", "-A", "agentweb", "beat"]) == "beat"
    assert process_kind(["/venv/bin/daphne", "agentweb.asgi:application"]) == "web"
    monkeypatch.setenv("AGENTWEB_PROCESS", "beat")
    assert process_kind(["/venv/bin/daphne"]) == "beat"
