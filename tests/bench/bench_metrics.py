"""Benchmark of observability's own costs, on a database with many runs.

Part 1: a `/metrics` scrape (the Redis hash + two indexed counts in PostgreSQL) with
        100,000 runs and 20,000 approvals stored and ~1,000 metric series in Redis:
        median and p95 over repeated scrapes. The scrape never reads events, so its cost
        does not grow with the number of runs' steps.
Part 2: what one stored step costs the storing thread: counting its metrics (a buffer
        add; Redis is written by a background thread) and, with tracing on, making its
        spans (into a batch processor whose exporter discards them).

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_metrics.py

Uses a database of its own (the DATABASE_URL's name + "_bench_metrics").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_stack import bench_database, pct  # noqa: E402


def timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()

    os.environ.update(
        DATABASE_URL=bench_database(os.environ["DATABASE_URL"], "_bench_metrics"),
        DEBUG="1",
        AGENTWEB_DEMO_PASSWORD="bench-password",
        AGENTWEB_QUEUE=f"bench-metrics-{os.getpid()}",
        LOG_LEVEL="WARNING",
    )
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentweb.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from agentweb.observability import metrics, tracing, views
    from agentweb.runs import hooks
    from agentweb.runs.models import AgentProfile, Approval, Run

    call_command("migrate", "--noinput", verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    user = get_user_model().objects.get(username="operator")
    agent = AgentProfile.objects.first()
    assert agent is not None
    now = timezone.now()
    started = time.monotonic()
    statuses = ["succeeded"] * 8 + ["failed", "cancelled"]
    batch = 5000
    for offset in range(0, args.runs, batch):
        rows = []
        for i in range(offset, min(args.runs, offset + batch)):
            status = "waiting_approval" if i % 50 == 0 else statuses[i % len(statuses)]
            rows.append(
                Run(task=f"t{i}", agent=agent, model="demo", created_by=user, status=status)
            )
        created = Run.objects.bulk_create(rows)
        approvals = [
            Approval(
                run=run,
                call_id=f"c{run.pk}",
                tool="issue_refund",
                arguments={},
                arguments_hash="x",
                risk="high",
                status="pending" if run.status == "waiting_approval" else "approved",
                expires_at=now + timedelta(hours=24),
            )
            for run in created
            if run.pk % 5 == 0
        ]
        Approval.objects.bulk_create(approvals)
    print(
        f"stored {Run.objects.count()} runs, {Approval.objects.count()} approvals "
        f"in {time.monotonic() - started:.0f} s"
    )

    # ~1,000 series: 10 agents x 3 statuses, 5 models, 40 tools.
    for a in range(10):
        for status in ("succeeded", "failed", "cancelled"):
            counts = metrics._Batch()
            counts.inc("agentweb_runs_total", [status, f"agent-{a}"], 100)
            counts.observe("agentweb_run_duration_seconds", [], 12.5)
            _buffer_add(metrics, counts)
    for m in range(5):
        for _ in range(20):
            counts = metrics._Batch()
            counts.observe("agentweb_model_call_duration_seconds", [f"model-{m}"], 0.1 * (m + 1))
            counts.inc("agentweb_tokens_total", [f"model-{m}", "input"], 1000)
            counts.inc("agentweb_tokens_total", [f"model-{m}", "output"], 100)
            counts.inc_float("agentweb_cost_usd_total", [f"model-{m}"], 0.001)
            _buffer_add(metrics, counts)
    for t in range(40):
        for k in range(15):
            counts = metrics._Batch()
            counts.observe("agentweb_tool_call_duration_seconds", [f"tool-{t}"], 0.004 * 2**k)
            counts.inc("agentweb_tool_errors_total", [f"tool-{t}"])
            _buffer_add(metrics, counts)
    assert metrics.flush()
    fields = metrics._redis().hlen(metrics.redis_key())
    body = metrics.exposition(views.database_gauges())
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    ms = timed(lambda: metrics.exposition(views.database_gauges()), args.scrapes)
    gauges = timed(views.database_gauges, args.scrapes)
    print(
        f"/metrics scrape with {args.runs} runs, {fields} Redis fields, {series} samples: "
        f"p50 {statistics.median(ms):.1f} ms, p95 {pct(ms, 95):.1f} ms "
        f"(PostgreSQL gauges alone p50 {statistics.median(gauges):.1f} ms)"
    )
    metrics._redis().delete(metrics.redis_key())

    # Part 2: per stored step (a model call and two tool calls).
    step = hooks.StoredStep(
        run_id=1,
        agent_id=agent.pk,
        agent_name=agent.name,
        model="openai:bench",
        trace_id="ab" * 16,
        span_id="cd" * 8,
        parent_span_id="",
        started_at=now,
        created_at=now,
        usage={},
        failure_reason="",
        events=[
            (
                "model_called",
                {
                    "model": "bench",
                    "latency_ms": 200.0,
                    "tokens": {"input": 900, "output": 40},
                    "finish_reason": "tool_calls",
                    "cost_usd": 0.0001,
                },
            ),
            ("tool_call_started", {"call_id": "a", "tool": "lookup", "arguments": {}}),
            ("tool_call_started", {"call_id": "b", "tool": "lookup", "arguments": {}}),
            (
                "tool_call_finished",
                {"call_id": "a", "tool": "lookup", "ok": True, "duration_ms": 3},
            ),
            (
                "tool_call_finished",
                {"call_id": "b", "tool": "lookup", "ok": True, "duration_ms": 4},
            ),
        ],
    )
    n = 5000
    count_us = [x * 1000 for x in timed(lambda: metrics.record(step), n)]
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracing.use_processor(BatchSpanProcessor(Discard()))
    trace_us = [x * 1000 for x in timed(lambda: tracing.record(step), n)]
    print(
        f"per stored step (1 model call, 2 tool calls): metrics p50 "
        f"{statistics.median(count_us):.1f} µs; spans (tracing on) p50 "
        f"{statistics.median(trace_us):.1f} µs, p95 {pct(trace_us, 95):.1f} µs"
    )
    metrics.flush()
    metrics._redis().delete(metrics.redis_key())
    return 0


def _buffer_add(metrics: Any, batch: Any) -> None:
    with metrics._buffer.lock:
        for field, amount in batch.ints:
            metrics._buffer.add(field, amount)
        for field, value in batch.floats:
            metrics._buffer.add_float(field, value)


if __name__ == "__main__":
    sys.exit(main())
