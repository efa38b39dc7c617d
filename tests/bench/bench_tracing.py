"""Benchmark: what tracing costs a run, measured side by side.

Two identical stacks run at once against one database: each a web process and a worker
(own Celery queue); one exports every span over OTLP/HTTP to a local sink, the other has
tracing off. The scripted 3-tool run (4 model calls, zero model latency) goes to the two
stacks in turn, one run at a time, so both see the same machine load; the figures are the
medians from creation to finish (stored timestamps) and the median of the paired
differences.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_tracing.py [-n 60]

Uses a database of its own (the DATABASE_URL's name + "_bench_tracing").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from tests.bench.bench_stack import pct, responder  # noqa: E402
from tests.bench.stack_setup import seeded_django, stack_env, tokens  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer  # noqa: E402
from tests.fakes.otlp_sink import OtlpSink  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--runs", type=int, default=60, help="runs per side")
    args = parser.parse_args()

    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[key]
    env = stack_env("_bench_tracing")
    seeded_django()
    from tests.conftest import start_web, start_worker

    [token] = tokens("operator")

    server = FakeLLMServer()
    server.record = False
    server.responder = responder(0.0)
    sink = OtlpSink(keep=False)
    tmp = Path(tempfile.mkdtemp(prefix="agentweb-bench-tracing-"))
    procs = []
    clients: dict[str, httpx.Client] = {}
    try:
        for side in ("off", "on"):
            side_env = {
                **env,
                "OPENAI_BASE_URL": server.openai_url,
                "AGENTWEB_QUEUE": f"bench-tracing-{side}-{os.getpid()}",
            }
            if side == "on":
                side_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink.endpoint
            (tmp / side).mkdir()
            web, url = start_web(side_env, tmp / side)
            procs.append(web)
            procs.append(start_worker(side_env, tmp / side, f"tracing-{side}", concurrency=4))
            clients[side] = httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
            )
        conn = psycopg.connect(env["DATABASE_URL"], autocommit=True)

        def one(side: str, i: int) -> float:
            run = clients[side].post("/api/runs", json={"task": f"Check order {side}{i}"}).json()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT status, extract(epoch FROM finished_at - created_at) * 1000 "
                    "FROM runs_run WHERE id = %s",
                    (run["id"],),
                ).fetchone()
                if row and row[0] in ("succeeded", "failed", "cancelled"):
                    if row[0] != "succeeded":
                        raise SystemExit(f"run {run['id']} {row[0]}")
                    return float(row[1])
                time.sleep(0.005)
            raise SystemExit(f"run {run['id']} did not finish in 30 s")

        for i in range(5):  # warm-up: first imports, connections, the exporter's session
            one("off", -i - 1)
            one("on", -i - 1)
        ms: dict[str, list[float]] = {"off": [], "on": []}
        for i in range(args.runs):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            for side in order:
                ms[side].append(one(side, i))
        time.sleep(6)  # the batch processor's schedule delay: the last spans go out
        diffs = [b - a for a, b in zip(ms["off"], ms["on"], strict=True)]
        for side in ("off", "on"):
            print(
                f"tracing {side:>3}: 3-tool run, zero model latency: "
                f"p50 {statistics.median(ms[side]):.1f} ms, p95 {pct(ms[side], 95):.1f} ms "
                f"over {len(ms[side])} runs"
            )
        print(
            f"paired difference (on - off): median {statistics.median(diffs):+.1f} ms per run; "
            f"OTLP export requests received: {sink.requests}"
        )
    finally:
        for proc in reversed(procs):
            proc.stop()
        server.close()
        sink.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
