"""Benchmark: side effects exactly once while workers are killed -9 all the time.

200 runs, each doing two writes that need no approval (``add_customer_note`` on the demo
shop, whose ledger is in PostgreSQL), against two worker processes; every 0.5–2 s one of
them, at random, is killed with SIGKILL and started again. Runs are fed so that at most
``--in-flight`` are unfinished at a time: a run a kill interrupted then waits for a live
worker, not behind a queue of fresh runs (what is measured is recovery, not backlog).
A call whose outcome a kill left unknown goes to a person: an approver (this script,
through the API) "checks" and approves it, and it runs again under the same idempotency
key.

Reported: runs finished, writes executed per intended write (the bar: exactly 1.00, no
note missing or doubled), how many calls went to a person, and the recovery time (from a
kill to the next stored step of each run that worker held): p50 / p95, against the bar of
the lease plus 5 s (the beat job looks for expired leases every 5 s).

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_crash.py

Uses a database of its own (the DATABASE_URL's name + "_crash"), created and migrated.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from tests.bench.bench_stack import pct  # noqa: E402
from tests.bench.stack_setup import seeded_django, stack_env, tokens  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply  # noqa: E402

WRITES = 2


def responder(customer: str, delay: float) -> Any:
    """Two notes, one per turn, then an answer; decided by the conversation so far. Each
    reply takes ``delay`` seconds, so kills land while runs are in flight."""

    def respond(req: Recorded) -> Reply:
        if not isinstance(req.json, dict):  # a request cut short by a kill
            return Reply(status=400, json={"error": {"message": "incomplete request"}})
        messages = req.json["messages"]
        task = next(m for m in messages if m["role"] == "user")["content"]
        key = task.split()[-1]
        done = sum(1 for m in messages if m["role"] == "tool")
        if done < WRITES:
            note = f"bench {key} write {done + 1}"
            call = oa_call(
                f"w{done + 1}", "add_customer_note", {"customer_id": customer, "note": note}
            )
            return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
        return Reply(delay=delay, json=oa_reply(content=f"Both notes for {key} are in place."))

    return respond


class Workers:
    """Two worker processes in two slots; the main loop kills one and starts it again."""

    def __init__(self, env: dict[str, str], tmp: Path, threads: int) -> None:
        from tests.conftest import Proc

        self._proc_cls = Proc
        self.env, self.tmp, self.threads = env, tmp, threads
        self.slots: list[Any] = [self._start(i) for i in range(2)]
        self.kills: list[tuple[float, int]] = []  # (wall time, pid)
        self.generation = 0

    def _start(self, slot: int) -> Any:
        self.generation = getattr(self, "generation", 0) + 1
        name = f"crash{slot}-{self.generation}"
        return self._proc_cls(
            name,
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "agentweb",
                "worker",
                "-P",
                "threads",
                "-c",
                str(self.threads),
                "-l",
                "WARNING",
                "-n",
                f"{name}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            self.env,
            self.tmp / f"{name}.log",
        )

    def stop(self) -> None:
        for proc in self.slots:
            proc.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--runs", type=int, default=200)
    parser.add_argument("--lease", type=int, default=2, help="AGENTWEB_LEASE_SECONDS")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=8,
        help="runs started and not finished at any time (a new one starts as one ends), so "
        "a run a kill interrupted waits for a worker, not behind a queue of fresh runs",
    )
    parser.add_argument("--min-gap", type=float, default=0.5)
    parser.add_argument("--max-gap", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--model-delay", type=float, default=0.3, help="seconds per reply")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    env = stack_env("_crash", tools="tools.ticket", AGENTWEB_LEASE_SECONDS=str(args.lease))
    seeded_django()
    from agentweb.shop.models import Customer

    operator, approver = tokens("operator", "approver")
    customer = Customer.objects.order_by("code").values_list("code", flat=True).first()
    assert customer, "seed_demo made no customer"
    from tests.conftest import start_beat, start_web

    server = FakeLLMServer()
    server.record = False
    server.responder = responder(customer, args.model_delay)
    env["OPENAI_BASE_URL"] = server.openai_url
    tmp = Path(tempfile.mkdtemp(prefix="agentweb-crash-"))
    conn = psycopg.connect(env["DATABASE_URL"], autocommit=True)
    conn_feed = psycopg.connect(env["DATABASE_URL"], autocommit=True)
    web = beat = workers = None
    results: dict[str, Any] = {}
    try:
        web, url = start_web(env, tmp)
        beat = start_beat(env, tmp)
        workers = Workers(env, tmp, args.threads)
        time.sleep(3)  # let both workers come up before the first run

        def create(i: int) -> int:
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {operator}"}, timeout=60
            ) as c:
                for _ in range(20):  # the machine's PostgreSQL is shared: retry a 503
                    try:
                        r = c.post("/api/runs", json={"task": f"Bench run B{i}"})
                    except httpx.HTTPError:
                        time.sleep(0.5)
                        continue
                    if r.status_code == 201:
                        return int(r.json()["id"])
                    time.sleep(0.5)
            raise SystemExit(f"run B{i} could not be created")

        ids: list[int] = []
        started = time.monotonic()

        def create_all() -> None:  # runs start while the kills already go on
            for i in range(args.runs):
                while True:
                    busy = conn_feed.execute(
                        "SELECT count(*) FROM runs_run WHERE id = ANY(%s) AND status NOT IN "
                        "('succeeded','failed','cancelled')",
                        (ids,),
                    ).fetchone()
                    if busy is None or busy[0] < args.in_flight:
                        break
                    time.sleep(0.05)
                ids.append(create(i))

        creator = threading.Thread(target=create_all, daemon=True)
        creator.start()
        done = threading.Event()
        asked = {"approved": 0}

        def approve_unknown() -> None:
            """The person who checks a call a kill left unknown, and lets it run again."""
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {approver}"}, timeout=30
            ) as c:
                while not done.is_set():
                    try:
                        pending = c.get("/api/approvals", params={"status": "pending"}).json()
                        for approval in pending.get("approvals", []):
                            r = c.post(
                                f"/api/approvals/{approval['id']}/decide",
                                json={"decision": "approve", "comment": "checked: not done"},
                            )
                            if r.status_code == 200:
                                asked["approved"] += 1
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.2)

        approver_thread = threading.Thread(target=approve_unknown, daemon=True)
        approver_thread.start()
        held_at_kill: list[tuple[float, list[int]]] = []
        host = socket.gethostname()
        while time.monotonic() - started < args.timeout:
            if creator.is_alive() or len(ids) < args.runs:
                left: Any = (1,)
            else:
                left = conn.execute(
                    "SELECT count(*) FROM runs_run WHERE id = ANY(%s) AND status NOT IN "
                    "('succeeded','failed','cancelled')",
                    (ids,),
                ).fetchone()
            if left is not None and left[0] == 0:
                break
            time.sleep(random.uniform(args.min_gap, args.max_gap))
            alive = [i for i, p in enumerate(workers.slots) if p.proc.poll() is None]
            if not alive:
                continue
            victim = random.choice(alive)
            pid = workers.slots[victim].proc.pid
            held = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM runs_run WHERE status='running' AND lease_owner LIKE %s",
                    (f"{host}:{pid}:%",),
                ).fetchall()
            ]
            at = time.time()
            proc = workers.slots[victim]
            proc.kill9()
            workers.kills.append((at, pid))
            held_at_kill.append((at, held))
            proc.log.close()
            workers.slots[victim] = workers._start(victim)
        wall = time.monotonic() - started
        done.set()

        statuses = dict(
            conn.execute(
                "SELECT status, count(*) FROM runs_run WHERE id = ANY(%s) GROUP BY status",
                (ids,),
            ).fetchall()
        )
        notes = conn.execute(
            "SELECT body, count(*) FROM shop_customernote WHERE body LIKE 'bench B%%' GROUP BY body"
        ).fetchall()
        counts = {body: n for body, n in notes}
        intended = args.runs * WRITES
        executed = sum(counts.values())
        doubled = sum(1 for n in counts.values() if n > 1)
        expected = {f"bench B{i} write {w}" for i in range(args.runs) for w in (1, 2)}
        succeeded = {
            int(r[0])
            for r in conn.execute(
                "SELECT id FROM runs_run WHERE id = ANY(%s) AND status='succeeded'", (ids,)
            ).fetchall()
        }
        missing = len(expected - set(counts))
        # Recovery: from a kill to the next stored event of each run the dead worker held.
        recoveries = []
        for at, held in held_at_kill:
            kill_time = datetime.fromtimestamp(at, tz=UTC)
            for run_id in held:
                row = conn.execute(
                    "SELECT min(at) FROM runs_runevent WHERE run_id=%s AND at > %s",
                    (run_id, kill_time),
                ).fetchone()
                if row is not None and row[0] is not None:
                    recoveries.append((row[0] - kill_time).total_seconds())
        bar = args.lease + 5
        results = {
            "runs": args.runs,
            "finished": statuses.get("succeeded", 0),
            "statuses": statuses,
            "wall_s": round(wall, 1),
            "kills": len(workers.kills),
            "runs_interrupted": len(recoveries),
            "intended_writes": intended,
            "executed_writes": executed,
            "writes_per_intended": round(executed / intended, 4),
            "doubled": doubled,
            "missing": missing,
            "missing_in_succeeded_runs": sum(
                1
                for i, run_id in enumerate(ids)
                if run_id in succeeded
                for w in range(1, WRITES + 1)
                if f"bench B{i} write {w}" not in counts
            ),
            "asked_a_person": asked["approved"],
            "recovery_p50_s": round(statistics.median(recoveries), 2) if recoveries else None,
            "recovery_p95_s": round(pct(recoveries, 95), 2) if recoveries else None,
            "recovery_max_s": round(max(recoveries), 2) if recoveries else None,
            "bar_recovery_s": bar,
            "lease_s": args.lease,
        }
        print(
            f"{results['finished']}/{args.runs} runs finished in {wall:.0f} s under "
            f"{len(workers.kills)} kill -9 (every {args.min_gap}-{args.max_gap} s)"
        )
        print(
            f"writes executed per intended write: {executed}/{intended} = "
            f"{executed / intended:.2f} (doubled {doubled}, missing {missing}; bar: exactly 1.00)"
        )
        print(f"calls a kill left unknown, approved by a person: {asked['approved']}")
        if recoveries:
            print(
                f"recovery after a kill ({len(recoveries)} interrupted runs): p50 "
                f"{results['recovery_p50_s']} s, p95 {results['recovery_p95_s']} s, max "
                f"{results['recovery_max_s']} s (bar: lease {args.lease} s + 5 s = {bar} s)"
            )
    finally:
        conn_feed.close()
        if workers is not None:
            workers.stop()
        for proc in (beat, web):
            if proc is not None:
                proc.stop()
        server.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    ok = (
        results.get("finished") == args.runs
        and results.get("writes_per_intended") == 1.0
        and not results.get("doubled")
        and (results.get("recovery_p95_s") or 0) <= args.lease + 5
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
