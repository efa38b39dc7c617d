"""Benchmark of ticket intake (DESIGN §11, issue 24) through the whole stack: Daphne, a
Celery worker, beat and a fake model at zero latency, tickets posted as a helpdesk posts
them (a generic source's signed webhook, ``POST /hooks/tickets/<source>``).

1. Tickets per second through the signed webhook: ``--tickets`` new tickets, each its own
   ``ticket.created`` delivery, posted by ``--clients`` threads at once, on a queue no
   rule matches; every answer must be 202. Also the answer's p50/p95 and, beside it, the
   floor: the same number of signed POSTs to a source that does not exist (404 after the
   same routing and the source look-up, nothing stored).
2. Delivery → started run with an ``auto`` rule: a ticket posted to the rule's queue, from
   the moment the POST is sent to the run's row (the rule created it, in the delivery's
   request) and to its stored ``run_started`` (a worker took it), one at a time and then
   ``--burst`` posted at once. Each run must succeed.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_intake.py

Uses a database of its own (the DATABASE_URL's name + "_bench_intake"). Prints medians and
p95 with the load average; no bars are asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from agentweb import signing  # noqa: E402
from tests.bench.stack_setup import seeded_django, stack_env  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_reply  # noqa: E402

SECRET = "bench-intake-secret-0123456789abcdef"
SOURCE = "benchdesk"
RULE_QUEUE = "auto-bench"


def responder(req: Recorded) -> Reply:
    return Reply(json=oa_reply(content="Handled."))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def line(name: str, values: list[float]) -> dict[str, float]:
    p50, p95 = statistics.median(values), pct(values, 0.95)
    print(f"  {name:<52} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   (n={len(values)})")
    return {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "n": len(values)}


def delivery(n: str, queue: str) -> bytes:
    return json.dumps(
        {
            "event": "ticket.created",
            "delivery_id": f"d-{n}",
            "ticket": {
                "external_id": f"T-{n}",
                "subject": f"Parcel {n} has not arrived",
                "requester": {"email": f"c{n}@customer.example", "name": f"Customer {n}"},
                "queue": queue,
                "tags": ["late"],
                "fields": {"order_id": f"A{n}"},
            },
            "message": {"external_id": f"m-{n}", "body": "Where is my parcel? " * 10},
        }
    ).encode()


class Poster:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=64))

    def post(self, body: bytes, source: str = SOURCE) -> tuple[int, float, float, Any]:
        """(status, when sent: unix seconds, answer time ms, answer JSON)."""
        headers = {"Content-Type": "application/json", **signing.agentweb_headers(SECRET, body)}
        sent = time.time()
        started = time.perf_counter()
        answer = self.client.post(
            f"{self.url}/hooks/tickets/{source}", content=body, headers=headers
        )
        took = (time.perf_counter() - started) * 1000
        return answer.status_code, sent, took, answer.json()


def poll(conn: Any, sql: str, args: tuple[Any, ...], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(sql, args).fetchone()
        if row is not None and row[0] is not None:
            return row
        time.sleep(0.003)
    raise SystemExit(f"timed out: {sql} {args}")


def run_of(conn: Any, ticket_id: int) -> tuple[int, float, float]:
    """(run id, run row created, run_started stored): unix seconds."""
    run_id, created = poll(
        conn,
        "SELECT id, extract(epoch FROM created_at) FROM runs_run WHERE ticket_id=%s",
        (ticket_id,),
    )
    (started,) = poll(
        conn,
        "SELECT extract(epoch FROM at) FROM runs_runevent WHERE run_id=%s AND type='run_started'",
        (run_id,),
    )
    return int(run_id), float(created), float(started)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tickets", type=int, default=400, help="tickets for the throughput")
    parser.add_argument("--clients", type=int, default=8, help="threads posting at once")
    parser.add_argument("--rounds", type=int, default=40, help="auto-rule tickets, one at a time")
    parser.add_argument("--burst", type=int, default=20, help="auto-rule tickets at once")
    parser.add_argument("--threads", type=int, default=8, help="worker threads")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    llm = FakeLLMServer()
    llm.record = False
    llm.responder = responder
    rules = json.dumps([{"queue": RULE_QUEUE, "agent": "bench-intake", "mode": "auto"}])
    env = stack_env("_bench_intake", OPENAI_BASE_URL=llm.openai_url, AGENTWEB_INTAKE_RULES=rules)
    seeded_django()
    from agentweb.runs.models import AgentProfile
    from agentweb.tickets import actions

    AgentProfile.objects.create(name="bench-intake", system_prompt="You answer tickets.")
    actions.do_add_source(SOURCE, kind="generic", secret=SECRET)
    from tests.conftest import start_beat, start_web, start_worker

    tmp = Path(tempfile.mkdtemp(prefix="agentweb-bench-intake-"))
    procs = []
    results: dict[str, Any] = {"worker_threads": args.threads, "clients": args.clients}
    try:
        web, url = start_web(env, tmp)
        procs += [web, start_worker(env, tmp, "bench-intake", args.threads), start_beat(env, tmp)]
        conn = psycopg.connect(env["DATABASE_URL"], autocommit=True)
        poster = Poster(url)
        for i in range(20):  # warm-up: connections, the view's first imports
            assert poster.post(delivery(f"warm-{i}", "plain"))[0] == 202

        # 1. tickets per second through the signed webhook, no rule
        bodies = [delivery(f"tp-{i}", "plain") for i in range(args.tickets)]
        loads = [os.getloadavg()[0]]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            answers = list(pool.map(poster.post, bodies))
        wall = time.perf_counter() - started
        loads.append(os.getloadavg()[0])
        statuses = {a[0] for a in answers}
        assert statuses == {202}, statuses
        made = conn.execute(
            "SELECT count(*) FROM tickets_ticket WHERE source=%s AND external_id LIKE 'T-tp-%%'",
            (SOURCE,),
        ).fetchone()[0]
        assert made == args.tickets, made
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            floor = list(pool.map(lambda b: poster.post(b, "nosuchsource"), bodies))
        assert {a[0] for a in floor} == {404}
        rate = args.tickets / wall

        # 2. delivery -> started run with an auto rule
        to_row, to_started = [], []
        for i in range(args.rounds + 1):
            status, sent, _, body = poster.post(delivery(f"auto-{i}", RULE_QUEUE))
            assert status == 202, body
            _, created, run_started = run_of(conn, int(body["ticket"]))
            if i:  # the first is a warm-up
                to_row.append((created - sent) * 1000)
                to_started.append((run_started - sent) * 1000)
        burst_bodies = [delivery(f"burst-{i}", RULE_QUEUE) for i in range(args.burst)]
        with ThreadPoolExecutor(max_workers=args.burst) as pool:
            burst = list(pool.map(poster.post, burst_bodies))
        burst_row, burst_started = [], []
        for status, sent, _, body in burst:
            assert status == 202, body
            _, created, run_started = run_of(conn, int(body["ticket"]))
            burst_row.append((created - sent) * 1000)
            burst_started.append((run_started - sent) * 1000)
        poll(
            conn,
            "SELECT CASE WHEN count(*) FILTER (WHERE status NOT IN ('succeeded','failed'))=0 "
            "THEN count(*) END FROM runs_run",
            (),
            timeout=120,
        )
        failed = conn.execute("SELECT count(*) FROM runs_run WHERE status<>'succeeded'").fetchone()
        runs = conn.execute("SELECT count(*) FROM runs_run").fetchone()[0]
        assert runs == args.rounds + 1 + args.burst, runs  # one run per auto ticket, no more

        load = os.getloadavg()[0]
        results["load_average_1m"] = round(load, 2)
        results["load_average_during_throughput"] = [round(x, 2) for x in loads]
        print(
            f"ticket intake, one Daphne, {args.threads} worker threads, zero model latency "
            f"(load average {load:.1f} on {os.cpu_count()} cores; "
            f"{loads[0]:.1f} -> {loads[1]:.1f} during the throughput run):"
        )
        print(f" signed webhook, {args.tickets} new tickets by {args.clients} clients at once")
        print(f"  {'tickets per second':<52} {rate:7.1f} /s   ({wall:.2f} s)")
        results["tickets_per_second"] = round(rate, 1)
        results["webhook_answer"] = line("the answer (202)", [a[2] for a in answers])
        results["floor_unknown_source"] = line(
            "floor: the same POSTs to no source (404)", [a[2] for a in floor]
        )
        print(" delivery sent -> run of the auto rule")
        results["auto_to_run_row"] = line("-> run created, one at a time", to_row)
        results["auto_to_run_started"] = line("-> run_started stored, one at a time", to_started)
        results[f"auto_to_run_row_burst_{args.burst}"] = line(
            f"-> run created, {args.burst} at once", burst_row
        )
        results[f"auto_to_run_started_burst_{args.burst}"] = line(
            f"-> run_started stored, {args.burst} at once", burst_started
        )
        print(f"  runs: {runs}, not succeeded: {failed[0]}")
        results["runs_not_succeeded"] = int(failed[0])
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return 0
    finally:
        for proc in reversed(procs):
            proc.stop()
        llm.close()


if __name__ == "__main__":
    sys.exit(main())
