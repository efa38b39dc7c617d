"""Benchmark of experiments and forks (DESIGN §14) on the whole stack (Daphne, one Celery
worker of ``--threads`` threads, a fake OpenAI-compatible model of ``--model-delay`` s).

- An experiment of ``--cases`` task cases (each: a lookup, a pay_out that the dry run
  holds back, an answer): its wall time (created -> its last case finished) against the
  sum of its cases' own times (started -> finished): how parallel the workers play it.
- A fork's cost against a fresh run: ``--rounds`` fresh dry runs of the same task, each forked
  after its first event; medians of wall time (created -> finished) and model calls of
  each, and how many tool calls the fork ran against how many got recorded results.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_experiments.py

Uses a database of its own (the DATABASE_URL's name + "_bench_experiments").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from tests.bench.stack_setup import seeded_django, stack_env, tokens  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply  # noqa: E402


def responder(delay: float) -> Any:
    def respond(req: Recorded) -> Reply:
        messages = req.json["messages"]
        done = [m for m in messages if m["role"] == "tool"]
        n = len(messages)
        if not done:
            call = oa_call(f"l-{n}-{time.monotonic_ns()}", "lookup", {"order_id": "A1"})
            return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
        if len(done) == 1:
            args = {"order_id": "A1", "amount": 5}
            call = oa_call(f"p-{n}-{time.monotonic_ns()}", "pay_out", args)
            return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
        return Reply(delay=delay, json=oa_reply(content="Refunded 5 on A1."))

    return respond


def wait_final(conn: Any, ids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM runs_run WHERE id = ANY(%s) AND status IN "
            "('succeeded', 'failed', 'cancelled')",
            (ids,),
        ).fetchone()
        if row and row[0] == len(ids):
            return
        time.sleep(0.02)
    raise SystemExit(f"runs {ids[:5]}... did not finish in {timeout:.0f} s")


def times(conn: Any, run_id: int) -> tuple[float, int, str]:
    row = conn.execute(
        "SELECT extract(epoch FROM finished_at - created_at), "
        "coalesce((usage->>'model_calls')::int, 0), status FROM runs_run WHERE id=%s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return float(row[0]) * 1000, int(row[1]), str(row[2])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--model-delay", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=8, help="worker threads")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    env = stack_env("_bench_experiments")
    seeded_django()
    from agentweb.runs.models import AgentProfile
    from tests.conftest import start_web, start_worker

    AgentProfile.objects.create(
        name="tester", system_prompt="You refund.", allowed_tools=["lookup", "pay_out"]
    )
    [token] = tokens("operator")
    server = FakeLLMServer()
    server.record = False
    server.responder = responder(args.model_delay)
    env["OPENAI_BASE_URL"] = server.openai_url
    tmp = Path(tempfile.mkdtemp(prefix="agentweb-bench-experiments-"))
    procs = []
    try:
        web, url = start_web(env, tmp)
        procs.append(web)
        procs.append(start_worker(env, tmp, "bench-experiments", concurrency=args.threads))
        client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        conn = psycopg.connect(env["DATABASE_URL"], autocommit=True)
        # warm-up: one run through the stack
        warm = client.post(
            "/api/runs", json={"task": "warm", "agent": "tester", "mode": "dry"}
        ).json()
        wait_final(conn, [warm["id"]], 60)

        cases = [{"name": f"case {i}", "task": f"Refund A1 ({i})",
                  "expect": {"calls": [{"tool": "pay_out", "arguments": {"order_id": "A1"}}]}}
                 for i in range(args.cases)]  # fmt: skip
        made = client.post("/api/suites", json={"name": "bench", "cases": cases})
        assert made.status_code == 201, made.text
        started = client.post("/api/suites/bench/experiments", json={"agent": "tester"})
        assert started.status_code == 201, started.text
        exp = started.json()
        ids = [c["run"] for c in exp["cases"]]
        wait_final(conn, ids, 600)
        row = conn.execute(
            "SELECT extract(epoch FROM max(finished_at) - min(created_at)), "
            "sum(extract(epoch FROM finished_at - started_at)) FROM runs_run WHERE id = ANY(%s)",
            (ids,),
        ).fetchone()
        assert row is not None
        wall_ms, sum_ms = float(row[0]) * 1000, float(row[1]) * 1000
        result = client.get(f"/api/experiments/{exp['id']}").json()
        paid = conn.execute("SELECT count(*) FROM runs_toolexecution WHERE tool='pay_out'")
        paid_out = paid.fetchone()
        assert paid_out is not None

        fresh, forked, fresh_calls, fork_calls, recorded, ran = [], [], [], [], 0, 0
        for i in range(args.rounds):
            run = client.post(
                "/api/runs", json={"task": f"fork {i}", "agent": "tester", "mode": "dry"}
            ).json()
            wait_final(conn, [run["id"]], 60)
            fork = client.post(f"/api/runs/{run['id']}/fork", json={"at_seq": 1}).json()
            wait_final(conn, [fork["id"]], 60)
            for target, calls, rid in ((fresh, fresh_calls, run["id"]),
                                       (forked, fork_calls, fork["id"])):  # fmt: skip
                ms, model_calls, _ = times(conn, rid)
                target.append(ms)
                calls.append(model_calls)
            events = client.get(f"/api/runs/{fork['id']}/events").json()["events"]
            done = [e["data"] for e in events if e["type"] == "tool_call_finished" and e["seq"] > 1]
            recorded += sum(1 for d in done if d.get("recorded"))
            ran += sum(1 for d in done if not d.get("recorded"))
        load = os.getloadavg()[0]
        results = {
            "cases": args.cases,
            "worker_threads": args.threads,
            "model_delay_ms": args.model_delay * 1000,
            "experiment_wall_ms": round(wall_ms, 1),
            "experiment_cases_sum_ms": round(sum_ms, 1),
            "sum_over_wall": round(sum_ms / wall_ms, 2),
            "experiment_status": result["status"],
            "passed": result["passed"],
            "pay_out_executed": paid_out[0],
            "fresh_run_wall_ms_p50": round(statistics.median(fresh), 1),
            "fork_wall_ms_p50": round(statistics.median(forked), 1),
            "fresh_model_calls_p50": statistics.median(fresh_calls),
            "fork_model_calls_p50": statistics.median(fork_calls),
            "fork_tool_calls_recorded": recorded,
            "fork_tool_calls_run": ran,
            "load_average_1m": round(load, 2),
        }
        print(
            f"experiment of {args.cases} cases, {args.threads} worker threads, "
            f"{args.model_delay * 1000:.0f} ms model (load {load:.1f}):\n"
            f"  wall {wall_ms:.0f} ms; its cases' own times sum to {sum_ms:.0f} ms "
            f"(sum / wall = {sum_ms / wall_ms:.2f}x); {result['passed']}/{result['total']} passed "
            f"({result['status']}); pay_out executed {paid_out[0]} times\n"
            f"fork after the first event vs a fresh run, median of {args.rounds}:\n"
            f"  fresh {statistics.median(fresh):.0f} ms, {statistics.median(fresh_calls)} model "
            f"calls; fork {statistics.median(forked):.0f} ms, "
            f"{statistics.median(fork_calls)} model calls; fork tool calls: {recorded} recorded, "
            f"{ran} run"
        )
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        bad = result["passed"] != args.cases or paid_out[0] != 0
        return 1 if bad else 0
    finally:
        for proc in reversed(procs):
            proc.stop()
        server.close()


if __name__ == "__main__":
    sys.exit(main())
