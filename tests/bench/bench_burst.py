"""Benchmark: 500 runs of the scripted 3-tool task started at once against the real stack,
and what each run costs in CPU time, per kind of process (DESIGN §5, issue 30).

The stack is started as ``make run`` starts it (``agentweb.devstack.stack_argv``: Daphne,
Celery workers with 8 threads in all (two processes of 4 on a machine of two cores or
more), beat; their log level WARNING), on a database of its
own, with a fake OpenAI-compatible model at zero latency over HTTP in a child process
(its CPU time is not the stack's). 8 client threads post the runs to ``POST /api/runs``
as fast as the API answers; the bench waits for every run to end, then checks each one:
succeeded, its three tools called in order with its own arguments, its events complete
with contiguous seqs.

CPU time comes from ``/proc/<pid>/stat`` (user + system, all threads): the web, worker
and beat processes, and the PostgreSQL backends serving the bench's database (found in
``pg_stat_activity``, sampled through the burst so short-lived ones count too; the
bench's own connection is left out). Figures are per run: the CPU time spent from the
first POST until the last run ended, divided by the runs.

Then the approvals: ``--approvals`` runs (default 40), each asking for one high-risk
call, decided one at a time through ``POST /api/approvals/{id}/decide``; reported p50/p95
from the decide POST to the approved call's stored ``tool_call_started`` (its ``at``),
and of the decide response alone beside it. Those run on a quiet stack, after the burst;
``--approvals-in-burst`` (default 30) more are decided one at a time, one every 0.1 s,
while the clients are still posting the burst's runs (runs paused before it began; the
rounds left when the posting ends are not decided, and said), reported the same way with
the runs queued at each decision: how long a person's decision waits behind new runs.

Also reported: runs claimed more than once (``attempts`` > 1: a lease expired, a wake-up
repeated), and the sweep's "re-enqueued" warnings from the logs.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_burst.py \\
        [-n 500] [--clients 8] [--json out.json]

Figures only; no bars are asserted. The bars (issue 30): <= 80 ms CPU per run in all,
the worker <= 40; decision to ``tool_call_started`` p95 <= 100 ms.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from tests.bench.stack_setup import (  # noqa: E402
    make_run_stack,
    seeded_django,
    stack_env,
    tokens,
    wait_for_web,
)
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply  # noqa: E402

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
EXPECTED = (
    ["run_started"]
    + ["model_called", "tool_call_started", "tool_call_finished"] * 3
    + ["model_called", "run_finished"]
)


def respond(req: Recorded) -> Reply:
    """Three lookups of the order the task names (``<order>-0``, ``-1``, ``-2``, in that
    order), then an answer; a task that says "pay" asks for one pay_out first (high
    risk: a person decides), then answers."""
    messages = req.json["messages"]
    task = next(m for m in messages if m["role"] == "user")["content"]
    order = task.split()[-1]
    done = sum(1 for m in messages if m["role"] == "tool")
    if task.startswith("Pay"):
        if done == 0:
            call = oa_call("pay0", "pay_out", {"order_id": order, "amount": 5})
            return Reply(json=oa_reply(tool_calls=[call]))
        return Reply(json=oa_reply(content=f"Paid {order}."))
    if done < 3:
        call = oa_call(f"c{done}", "lookup", {"order_id": f"{order}-{done}"})
        return Reply(json=oa_reply(tool_calls=[call]))
    return Reply(json=oa_reply(content=f"Checked {order} three times."))


def _serve(conn: Any) -> None:
    server = FakeLLMServer()
    server.record = False
    server.responder = respond
    conn.send(server.openai_url)
    conn.recv()
    server.close()


def start_model() -> tuple[str, Any, Any]:
    """The fake model in a child process: its URL, the process, the pipe that stops it."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(child,), daemon=True)
    proc.start()
    return parent.recv(), proc, parent


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def cpu_ticks(pid: int) -> int | None:
    """User + system time of a process (all its threads), in clock ticks; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)


class BackendSampler:
    """CPU ticks of the PostgreSQL backends serving the bench's database, sampled every
    ``interval`` s (a backend that ends between two samples loses its last slice)."""

    def __init__(self, dsn: str, interval: float = 0.2, exclude: tuple[int, ...] = ()) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        own = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        self.exclude = [own, *exclude]  # its own session, and those the caller names
        self.interval = interval
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.baseline = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> ALL(%s)",
            (self.exclude,),
        ).fetchall()
        for (pid,) in rows:
            ticks = cpu_ticks(pid)
            if ticks is None:
                continue
            if pid not in self.first:
                self.first[pid] = ticks if self.baseline else 0
            self.last[pid] = ticks

    def start(self) -> None:
        self.first, self.last = {}, {}
        self.baseline = True
        self.sample()
        self.baseline = False  # backends that start later count from zero
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> tuple[float, int]:
        """CPU ms spent by the backends since ``start``, and how many were seen."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        ticks = sum(self.last[p] - self.first[p] for p in self.last)
        return ticks * TICK_MS, len(self.last)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=500)
    parser.add_argument("--clients", type=int, default=8, help="client threads posting runs")
    parser.add_argument("--approvals", type=int, default=40, help="approval rounds (0: none)")
    parser.add_argument(
        "--approvals-in-burst",
        type=int,
        default=30,
        help="approvals decided one at a time while the burst's runs are being posted",
    )
    parser.add_argument("--json", metavar="PATH", help="write a JSON summary here")
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="sample web and worker through the burst with py-spy (on PATH) into DIR",
    )
    args = parser.parse_args()

    model_url, model_proc, model_stop = start_model()
    env = stack_env("_burst", OPENAI_BASE_URL=model_url)
    seeded_django()
    operator, approver = tokens("operator", "approver")
    from django.db import connections

    connections.close_all()  # this process's connections are not the stack's

    tmp = Path(tempfile.mkdtemp(prefix="agentweb-burst-"))
    watch_gc(env, tmp)
    procs, url = make_run_stack(env, tmp)
    results: dict[str, Any] = {"runs": args.runs, "clients": args.clients}
    problems_total = 0
    try:
        conn = psycopg.connect(env["DATABASE_URL"], autocommit=True)
        sampler = BackendSampler(env["DATABASE_URL"])
        wait_for_web(url, procs["web"])

        def post(client: httpx.Client, task: str) -> int:
            resp = client.post("/api/runs", json={"task": task})
            resp.raise_for_status()
            return int(resp.json()["id"])

        def wait_ended(ids: list[int], timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                left = conn.execute(
                    "SELECT count(*) FROM runs_run WHERE id = ANY(%s) AND status NOT IN "
                    "('succeeded','failed','cancelled','waiting_approval')",
                    (ids,),
                ).fetchone()
                if left and left[0] == 0:
                    return
                time.sleep(0.05)
            raise SystemExit(f"runs did not end in {timeout:.0f}s; logs in {tmp}")

        clients = [
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {operator}"}, timeout=120)
            for _ in range(args.clients)
        ]
        # Warm-up: every process has imported and connected what a run needs.
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            warm = list(
                pool.map(lambda i: post(clients[i % args.clients], f"Check order W{i}"), range(16))
            )
        wait_ended(warm, 180)

        # Runs paused for a person before the burst; decided while it is under way.
        paused = [post(clients[0], f"Pay order L{i}") for i in range(args.approvals_in_burst)]
        pending = [pending_approval(conn, run_id) for run_id in paused]
        in_burst = InBurst(conn, url, approver, list(zip(paused, pending, strict=True)))

        # The burst.
        orders: dict[int, str] = {}
        load_before = os.getloadavg()
        start_ticks = {name: cpu_ticks(p.proc.pid) or 0 for name, p in procs.items()}
        spies = _spy(args.py_spy, procs) if args.py_spy else []
        sampler.start()
        started, burst_began = time.monotonic(), time.time()
        in_burst.start()

        def client_part(k: int) -> list[tuple[int, str]]:
            out = []
            for i in range(k, args.runs, args.clients):
                order = f"B{i}"
                out.append((post(clients[k], f"Check order {order}"), order))
            return out

        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            for part in pool.map(client_part, range(args.clients)):
                orders.update(part)
        in_burst.posted.set()
        posted = time.monotonic() - started
        ids = list(orders)
        wait_ended(ids, 1800)
        in_burst.join()
        wall = time.monotonic() - started
        full_passes = gc_passes(tmp, procs, burst_began, time.time())
        end_ticks = {name: cpu_ticks(p.proc.pid) or 0 for name, p in procs.items()}
        pg_ms, backends = sampler.stop()
        load_after = os.getloadavg()
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)

        cpu: dict[str, float] = {}  # by kind: the workers (worker, worker-2, ...) together
        for name in procs:
            kind = name.split("-")[0]
            spent = (end_ticks[name] - start_ticks[name]) * TICK_MS / len(ids)
            cpu[kind] = cpu.get(kind, 0.0) + spent
        cpu["postgres"] = pg_ms / len(ids)
        cpu["total"] = sum(cpu.values())
        problems = check_runs(conn, ids, orders)
        problems_total += sum(problems.values())
        latency = [
            float(r[0])
            for r in conn.execute(
                "SELECT extract(epoch FROM finished_at - created_at) * 1000 FROM runs_run "
                "WHERE id = ANY(%s)",
                (ids,),
            ).fetchall()
        ]
        reclaimed = conn.execute(
            "SELECT count(*), coalesce(max(attempts), 0) FROM runs_run "
            "WHERE id = ANY(%s) AND attempts > 1",
            (ids,),
        ).fetchone()
        requeues = sum(
            p.output().count("re-enqueued") for p in procs.values() if p.log_path.exists()
        )
        burst = {
            "runs_per_s": round(len(ids) / wall, 2),
            "wall_s": round(wall, 2),
            "posting_s": round(posted, 2),
            "cpu_ms_per_run": {k: round(v, 2) for k, v in cpu.items()},
            "postgres_backends_seen": backends,
            "created_to_finished_ms": {
                "p50": round(statistics.median(latency), 1),
                "p95": round(pct(latency, 95), 1),
            },
            "claimed_more_than_once": {"runs": reclaimed[0], "max_attempts": reclaimed[1]},
            "sweep_reenqueue_warnings": requeues,
            "gc_full_passes_ms": full_passes,
            "problems": problems,
            "load_average": {"before": load_before, "after": load_after},
        }
        results["burst"] = burst
        print(
            f"{len(ids)} runs of the 3-tool task started at once by {args.clients} clients: "
            f"all ended in {wall:.1f} s ({burst['runs_per_s']:.1f} runs/s; posting took "
            f"{posted:.1f} s)"
        )
        print("  CPU ms per run   " + "  ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
        print(f"  (PostgreSQL: {backends} backends of the stack's database seen)")
        print(
            f"  created -> finished p50 {burst['created_to_finished_ms']['p50']:.0f} ms, "
            f"p95 {burst['created_to_finished_ms']['p95']:.0f} ms"
        )
        print(
            f"  claimed more than once: {reclaimed[0]} runs (max attempts {reclaimed[1]}); "
            f"sweep re-enqueue warnings: {requeues}"
        )
        print(
            "  the garbage collector's full passes (every thread of the process stopped): "
            + "; ".join(
                f"{kind} {len(ms)}" + (f", longest {max(ms):.0f} ms" if ms else "")
                for kind, ms in full_passes.items()
            )
        )
        print(f"  checks: {problems}")
        print(f"  load average before {_load(load_before)}, after {_load(load_after)}")
        if in_burst.rounds:
            results["approvals_in_burst"] = in_burst.report()
            problems_total += in_burst.problems

        if args.approvals:
            results["approvals"] = approvals(conn, url, operator, approver, args.approvals)
            problems_total += results["approvals"]["problems"]
        for c in clients:
            c.close()
        sampler.conn.close()
    finally:
        for proc in procs.values():
            proc.stop()
        model_stop.send("stop")
        model_proc.join(5)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if problems_total else 0


def pending_approval(conn: psycopg.Connection, run_id: int, timeout: float = 60) -> int | None:
    """The id of ``run_id``'s pending approval once it has one (None after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT id FROM runs_approval WHERE run_id = %s AND status = 'pending'", (run_id,)
        ).fetchone()
        if row:
            return int(row[0])
        time.sleep(0.01)
    return None


def tool_started_at(conn: psycopg.Connection, run_id: int, timeout: float = 120) -> float | None:
    """The epoch of ``run_id``'s stored ``tool_call_started`` once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT extract(epoch FROM at) FROM runs_runevent "
            "WHERE run_id = %s AND type = 'tool_call_started'",
            (run_id,),
        ).fetchone()
        if row:
            return float(row[0])
        time.sleep(0.002)
    return None


class InBurst(threading.Thread):
    """Approvals decided one at a time while the burst's runs are being posted: from half
    a second after the burst began, one every 0.1 s, until the clients have posted every
    run (``posted`` set; the rounds left then are not decided, and not counted); each from
    the decide POST to its call's stored ``tool_call_started``."""

    def __init__(
        self, conn: psycopg.Connection, url: str, approver: str, rounds: list[tuple[int, Any]]
    ) -> None:
        super().__init__(daemon=True)
        self.dsn = conn.info.dsn
        self.url, self.approver, self.rounds = url, approver, rounds
        self.ms: list[float] = []
        self.answer_ms: list[float] = []
        self.queued: list[int] = []
        self.problems = 0
        self.posted = threading.Event()  # set when the clients have posted every run
        self.not_decided = 0  # rounds left when the posting ended

    def run(self) -> None:
        conn = psycopg.connect(self.dsn, autocommit=True)
        decider = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.approver}"}, timeout=60
        )
        time.sleep(0.5)
        for k, (run_id, approval_id) in enumerate(self.rounds):
            if approval_id is None:
                self.problems += 1
                continue
            if self.posted.is_set():
                self.not_decided = len(self.rounds) - k
                break
            row = conn.execute("SELECT count(*) FROM runs_run WHERE status = 'queued'").fetchone()
            sent = time.time()
            resp = decider.post(
                f"/api/approvals/{approval_id}/decide", json={"decision": "approve"}
            )
            answered = time.time()
            started_at = tool_started_at(conn, run_id) if resp.status_code == 200 else None
            if started_at is None:
                self.problems += 1
                continue
            self.ms.append((started_at - sent) * 1000)
            self.answer_ms.append((answered - sent) * 1000)
            self.queued.append(int(row[0]) if row else 0)
            time.sleep(0.1)
        decider.close()
        conn.close()

    def report(self) -> dict[str, Any]:
        out = {
            "rounds": len(self.ms),
            "decide_to_tool_call_started_ms": {
                "p50": round(statistics.median(self.ms), 1) if self.ms else None,
                "p95": round(pct(self.ms, 95), 1) if self.ms else None,
                "max": round(max(self.ms), 1) if self.ms else None,
            },
            "decide_response_ms": {
                "p50": round(statistics.median(self.answer_ms), 1) if self.answer_ms else None,
                "p95": round(pct(self.answer_ms, 95), 1) if self.answer_ms else None,
            },
            "runs_queued_at_each_decision": self.queued,
            "not_decided_posting_ended": self.not_decided,
            "problems": self.problems,
        }
        d, r = out["decide_to_tool_call_started_ms"], out["decide_response_ms"]
        print(
            f"  approvals decided while the runs were being posted ({len(self.ms)}): decide "
            "POST -> "
            f"tool_call_started p50 {d['p50']} ms, p95 {d['p95']} ms, max {d['max']} ms; "
            f"the decide response alone p50 {r['p50']}, p95 {r['p95']} ms; runs queued at "
            f"each decision {self.queued}; left undecided as the posting ended "
            f"{self.not_decided}; problems {self.problems}"
        )
        return out


def approvals(
    conn: psycopg.Connection, url: str, operator: str, approver: str, rounds: int
) -> dict[str, Any]:
    """Runs that ask for one pay_out each, decided one at a time: decide POST → the
    approved call's ``tool_call_started`` stored (its ``created_at``)."""
    starter = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {operator}"}, timeout=60
    )
    decider = httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {approver}"}, timeout=60
    )
    total, answer, problems = [], [], 0
    load_before = os.getloadavg()
    for i in range(rounds + 3):
        run_id = starter.post("/api/runs", json={"task": f"Pay order Q{i}"}).json()["id"]
        approval_id = pending_approval(conn, run_id)
        if approval_id is None:
            problems += 1
            continue
        time.sleep(0.05)  # the run's pause is committed and its worker thread is free
        sent = time.time()
        resp = decider.post(f"/api/approvals/{approval_id}/decide", json={"decision": "approve"})
        answered = time.time()
        if resp.status_code != 200:
            problems += 1
            continue
        started_at = tool_started_at(conn, run_id, timeout=60)
        if started_at is None:
            problems += 1
            continue
        if i >= 3:  # warm-up rounds are not counted
            total.append((started_at - sent) * 1000)
            answer.append((answered - sent) * 1000)
    starter.close()
    decider.close()
    load_after = os.getloadavg()
    out = {
        "rounds": len(total),
        "decide_to_tool_call_started_ms": {
            "p50": round(statistics.median(total), 1),
            "p95": round(pct(total, 95), 1),
        },
        "decide_response_ms": {
            "p50": round(statistics.median(answer), 1),
            "p95": round(pct(answer, 95), 1),
        },
        "problems": problems,
        "load_average": {"before": load_before, "after": load_after},
    }
    d, r = out["decide_to_tool_call_started_ms"], out["decide_response_ms"]
    print(
        f"approval -> action over {len(total)} rounds: decide POST -> tool_call_started "
        f"p50 {d['p50']:.1f} ms, p95 {d['p95']:.1f} ms (bar p95 <= 100); the decide "
        f"response alone p50 {r['p50']:.1f}, p95 {r['p95']:.1f} ms; problems {problems}"
    )
    print(f"  load average before {_load(load_before)}, after {_load(load_after)}")
    return out


def check_runs(
    conn: psycopg.Connection, run_ids: list[int], orders: dict[int, str]
) -> dict[str, int]:
    problems = {
        "not_succeeded": 0,
        "events_incomplete": 0,
        "seqs_not_contiguous": 0,
        "tools_out_of_order_or_mixed_up": 0,
    }
    rows = conn.execute(
        "SELECT r.id, r.status, e.seq, e.type, e.data FROM runs_run r "
        "LEFT JOIN runs_runevent e ON e.run_id = r.id WHERE r.id = ANY(%s) ORDER BY r.id, e.seq",
        (run_ids,),
    ).fetchall()
    by_run: dict[int, list[Any]] = {}
    status: dict[int, str] = {}
    for run_id, st, seq, kind, data in rows:
        status[run_id] = st
        if seq is not None:
            by_run.setdefault(run_id, []).append((seq, kind, data))
    for run_id in run_ids:
        events = by_run.get(run_id, [])
        if status.get(run_id) != "succeeded":
            problems["not_succeeded"] += 1
        if [e[0] for e in events] != list(range(1, len(events) + 1)):
            problems["seqs_not_contiguous"] += 1
        if [e[1] for e in events] != EXPECTED:
            problems["events_incomplete"] += 1
        calls = [
            (e[2].get("tool"), e[2].get("arguments")) for e in events if e[1] == "tool_call_started"
        ]
        order = orders[run_id]
        if calls != [("lookup", {"order_id": f"{order}-{k}"}) for k in range(3)]:
            problems["tools_out_of_order_or_mixed_up"] += 1
    return problems


def _spy(where: str, procs: dict[str, Any]) -> list[subprocess.Popen[bytes]]:
    """py-spy recording the web and the worker processes (raw stacks, for flame graphs)."""
    Path(where).mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen(
            ["py-spy", "record", "--nonblocking", "-r", "100", "-f", "raw", "-p"]
            + [str(procs[name].proc.pid), "-o", str(Path(where) / f"{name}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name in procs
        if name != "beat"
    ]


# Loaded by the stack's processes through PYTHONPATH (``watch_gc``): each writes the
# length of every full pass of its garbage collector to BENCH_GC_DIR/<pid>.txt.
GC_WATCH = """
import gc, os, time

_dir = os.environ.get("BENCH_GC_DIR")
if _dir:
    _out = open(os.path.join(_dir, f"{os.getpid()}.txt"), "a", buffering=1)
    _began = [0.0]

    def _watch(phase, info):
        if phase == "start":
            _began[0] = time.perf_counter()
        elif info["generation"] == 2:
            _out.write(f"{time.time():.3f} {(time.perf_counter() - _began[0]) * 1000:.2f}\\n")

    gc.callbacks.append(_watch)
"""


def watch_gc(env: dict[str, str], tmp: Path) -> None:
    """The stack's processes note their collector's full passes (a ``sitecustomize`` on
    their PYTHONPATH; the project has none of its own)."""
    site, out = tmp / "gcwatch", tmp / "gc"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text(GC_WATCH)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["BENCH_GC_DIR"] = str(out)


def gc_passes(
    tmp: Path, procs: dict[str, Any], since: float, until: float
) -> dict[str, list[float]]:
    """The full passes' lengths (ms) between ``since`` and ``until``, by kind of process."""
    found: dict[str, list[float]] = {}
    for name, p in procs.items():
        kind = name.split("-")[0]
        lines = found.setdefault(kind, [])
        path = tmp / "gc" / f"{p.proc.pid}.txt"
        for line in path.read_text().splitlines() if path.exists() else []:
            at, ms = line.split()
            if since <= float(at) <= until:
                lines.append(float(ms))
    return found


def _load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
