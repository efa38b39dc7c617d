"""PostgreSQL connections of the whole stack under polling clients.

24 API clients at once start 60 runs between them (each run asks for one approval),
poll their runs and the approvals list as a dashboard would, and an approver decides
every pending call. Meanwhile a sampler counts the rows of ``pg_stat_activity`` for the
stack's database (web, worker and beat together; the sampler's own connection is not
counted). Printed: peak and median connections, requests and 5xx responses, and whether
any response said "too many clients". Bar: peak <= 40 and no 5xx.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_connections.py

Uses a database of its own (the DATABASE_URL's name + "_conns"), created and migrated.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from tests.bench.stack_setup import seeded_django, stack_env, tokens  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply  # noqa: E402

BAR_CONNECTIONS = 40


def responder(delay: float) -> Any:
    """A lookup, then a pay-out that needs an approval, then the answer."""

    def respond(req: Recorded) -> Reply:
        messages = req.json["messages"]
        task = next(m for m in messages if m["role"] == "user")["content"]
        order = task.split()[-1]
        done = sum(1 for m in messages if m["role"] == "tool")
        if done == 0:
            call = oa_call("c0", "lookup", {"order_id": order})
        elif done == 1:
            call = oa_call("c1", "pay_out", {"order_id": order, "amount": 5})
        else:
            return Reply(delay=delay, json=oa_reply(content=f"Paid out on {order}."))
        return Reply(delay=delay, json=oa_reply(tool_calls=[call]))

    return respond


class Sampler(threading.Thread):
    def __init__(self, url: str, database: str) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(url, autocommit=True)
        self.database = database
        self.samples: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            row = self.conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> "
                "pg_backend_pid()",
                (self.database,),
            ).fetchone()
            self.samples.append(int(row[0]) if row else 0)
            time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--model-delay", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=8, help="worker threads")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    env = stack_env("_conns")
    database = env["DATABASE_URL"].rsplit("/", 1)[-1].split("?")[0]
    seeded_django()
    from django.db import connections

    operator, approver = tokens("operator", "approver")
    connections.close_all()  # this process's own connection is not the stack's
    from tests.conftest import start_beat, start_web, start_worker

    server = FakeLLMServer()
    server.record = False
    server.responder = responder(args.model_delay)
    env["OPENAI_BASE_URL"] = server.openai_url
    tmp = Path(tempfile.mkdtemp(prefix="agentweb-conns-"))
    procs = []
    statuses: Counter[int] = Counter()
    too_many = 0
    lock = threading.Lock()
    try:
        web, url = start_web(env, tmp)
        procs.append(web)
        procs.append(start_worker(env, tmp, "conns", concurrency=args.threads))
        procs.append(start_beat(env, tmp))
        sampler = Sampler(env["DATABASE_URL"], database)
        sampler.start()
        idle = sampler.samples[-1:] or [0]
        time.sleep(1)

        def note(response: httpx.Response) -> httpx.Response:
            nonlocal too_many
            with lock:
                statuses[response.status_code] += 1
                if "too many clients" in response.text:
                    too_many += 1
            return response

        per_client = [args.runs // args.clients + (i < args.runs % args.clients)
                      for i in range(args.clients)]  # fmt: skip
        finished: list[int] = []

        def client(i: int) -> None:
            headers = {"Authorization": f"Bearer {operator}"}
            with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
                mine = []
                for k in range(per_client[i]):
                    r = note(c.post("/api/runs", json={"task": f"Pay out order B{i}-{k}"}))
                    if r.status_code == 201:
                        mine.append(r.json()["id"])
                open_ = set(mine)
                deadline = time.monotonic() + 180
                while open_ and time.monotonic() < deadline:
                    for run_id in list(open_):
                        r = note(c.get(f"/api/runs/{run_id}"))
                        if r.status_code == 200 and r.json()["status"] in ("succeeded", "failed"):
                            open_.discard(run_id)
                            with lock:
                                finished.append(run_id)
                    note(c.get("/api/approvals?status=pending"))
                    note(c.get("/api/runs?limit=20"))

        def approve_all(stop: threading.Event) -> None:
            headers = {"Authorization": f"Bearer {approver}"}
            with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
                while not stop.is_set():
                    r = note(c.get("/api/approvals?status=pending"))
                    for a in r.json().get("approvals", []) if r.status_code == 200 else []:
                        note(
                            c.post(f"/api/approvals/{a['id']}/decide", json={"decision": "approve"})
                        )
                    time.sleep(0.05)

        stop = threading.Event()
        approver_thread = threading.Thread(target=approve_all, args=(stop,), daemon=True)
        approver_thread.start()
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            list(pool.map(client, range(args.clients)))
        wall = time.monotonic() - started
        stop.set()
        approver_thread.join(10)
        sampler.stop.set()
        sampler.join(5)
    finally:
        for proc in reversed(procs):
            proc.stop()
        server.close()
    samples = sampler.samples
    errors_5xx = sum(n for code, n in statuses.items() if code >= 500)
    results = {
        "clients": args.clients,
        "runs": args.runs,
        "runs_finished": len(finished),
        "wall_s": round(wall, 1),
        "requests": sum(statuses.values()),
        "statuses": dict(sorted(statuses.items())),
        "responses_5xx": errors_5xx,
        "too_many_clients": too_many,
        "connections_idle": idle[0],
        "connections_peak": max(samples, default=0),
        "connections_median": statistics.median(samples) if samples else 0,
        "samples": len(samples),
        "bar_peak": BAR_CONNECTIONS,
    }
    print(
        f"{args.clients} API clients, {len(finished)}/{args.runs} runs with an approval each, "
        f"{results['requests']} requests in {wall:.1f} s"
    )
    print(
        f"PostgreSQL connections of the stack: peak {results['connections_peak']}, median "
        f"{results['connections_median']} over {len(samples)} samples (bar: peak <= "
        f"{BAR_CONNECTIONS}); 5xx responses: {errors_5xx}; 'too many clients': {too_many}"
    )
    print(f"  statuses: {results['statuses']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    ok = (
        results["connections_peak"] <= BAR_CONNECTIONS
        and errors_5xx == 0
        and len(finished) == args.runs
    )
    print("bar:", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
