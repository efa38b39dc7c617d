"""Benchmark of delegation: a coordinator hands 5 tasks to specialists at a 200 ms model.

Each specialist makes two model calls (a lookup, then its finding), so it takes a little
over 400 ms; the coordinator makes three (delegate ×5 in one reply, wait, answer). Run
one after the other, the children alone would take their sum; run in parallel, the
coordinator's wall time (created → finished, stored timestamps) should be close to one
child plus its own three calls. Medians over ``--rounds`` trees.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_delegation.py

Uses a database of its own (the DATABASE_URL's name + "_bench_delegation").
"""

from __future__ import annotations

import argparse
import json
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

CHILDREN = 5


def responder(delay: float) -> Any:
    def respond(req: Recorded) -> Reply:
        messages = req.json["messages"]
        system = str(messages[0]["content"])
        done = [m for m in messages if m["role"] == "tool"]
        if "specialist" in system:
            if not done:
                call = oa_call("l-1", "lookup", {"order_id": "A1"})
                return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
            return Reply(delay=delay, json=oa_reply(content="finding: delivered"))
        if not done:
            calls = [
                oa_call(f"d-{i}", "delegate_task", {"agent": "specialist", "task": f"part {i}"})
                for i in range(CHILDREN)
            ]
            return Reply(delay=delay, json=oa_reply(tool_calls=calls))
        if len(done) == CHILDREN:
            ids = [json.loads(m["content"])["task_id"] for m in done]
            call = oa_call("w-1", "wait_for_tasks", {"task_ids": ids})
            return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
        return Reply(delay=delay, json=oa_reply(content="All parts checked."))

    return respond


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model-delay", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=8, help="worker threads")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    env = stack_env("_bench_delegation")
    seeded_django()
    from agentweb.runs.models import AgentProfile
    from tests.conftest import start_web, start_worker

    AgentProfile.objects.create(
        name="specialist", system_prompt="You are a specialist.", allowed_tools=["lookup"]
    )
    AgentProfile.objects.create(
        name="lead",
        system_prompt="You are the coordinator.",
        allowed_tools=["lookup"],
        delegates=["specialist"],
    )
    [token] = tokens("operator")

    server = FakeLLMServer()
    server.record = False
    server.responder = responder(args.model_delay)
    env["OPENAI_BASE_URL"] = server.openai_url
    tmp = Path(tempfile.mkdtemp(prefix="agentweb-bench-delegation-"))
    procs = []
    try:
        web, url = start_web(env, tmp)
        procs.append(web)
        procs.append(start_worker(env, tmp, "bench-delegation", concurrency=args.threads))
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        conn = psycopg.connect(env["DATABASE_URL"], autocommit=True)
        walls, sums, longest, statuses = [], [], [], []
        for i in range(args.rounds + 1):
            run = client.post("/api/runs", json={"task": f"round {i}", "agent": "lead"}).json()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT status FROM runs_run WHERE id=%s", (run["id"],)
                ).fetchone()
                if row and row[0] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.02)
            else:
                raise SystemExit(f"run {run['id']} did not finish in 60 s")
            wall = conn.execute(
                "SELECT status, extract(epoch FROM finished_at - created_at) FROM runs_run "
                "WHERE id=%s",
                (run["id"],),
            ).fetchone()
            kids = conn.execute(
                "SELECT status, extract(epoch FROM finished_at - started_at) FROM runs_run "
                "WHERE parent_id=%s",
                (run["id"],),
            ).fetchall()
            if i == 0:  # warm-up: connections, imports
                continue
            assert wall is not None
            statuses.append((wall[0], sorted({k[0] for k in kids}), len(kids)))
            walls.append(float(wall[1]) * 1000)
            sums.append(sum(float(k[1]) for k in kids) * 1000)
            longest.append(max(float(k[1]) for k in kids) * 1000)
        wall_ms, sum_ms, long_ms = (statistics.median(v) for v in (walls, sums, longest))
        results = {
            "children": CHILDREN,
            "model_delay_ms": args.model_delay * 1000,
            "worker_threads": args.threads,
            "rounds": args.rounds,
            "coordinator_wall_ms_p50": round(wall_ms, 1),
            "children_sum_ms_p50": round(sum_ms, 1),
            "longest_child_ms_p50": round(long_ms, 1),
            "sum_over_wall": round(sum_ms / wall_ms, 2),
            "statuses": statuses,
        }
        print(
            f"coordinator + {CHILDREN} children, {args.model_delay * 1000:.0f} ms model, "
            f"{args.threads} worker threads, median of {args.rounds}:\n"
            f"  coordinator wall time {wall_ms:.0f} ms; children's times sum to {sum_ms:.0f} ms "
            f"(longest child {long_ms:.0f} ms); sum / wall = {sum_ms / wall_ms:.2f}x\n"
            f"  the coordinator's own 3 model calls take >= {3 * args.model_delay * 1000:.0f} ms"
        )
        bad = [s for s in statuses if s[0] != "succeeded" or s[1] != ["succeeded"]]
        if bad:
            print(f"  runs that did not succeed: {bad}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return 1 if bad else 0
    finally:
        for proc in reversed(procs):
            proc.stop()
        server.close()


if __name__ == "__main__":
    sys.exit(main())
