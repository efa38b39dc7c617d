"""Benchmark of the whole stack: API → Redis → Celery worker → model over HTTP → events
stored in PostgreSQL and published to the channel layer.

Part 1: the scripted 3-tool run (4 model calls, zero model latency), one run at a time;
        median and p95 from the run's creation to its finish (both stored timestamps),
        next to the bare in-process loop of bench_runtime for reference.
Part 2: 200 concurrent runs with a 200 ms model; every run's events must be complete,
        in order, without duplicates, and each run's tool arguments must be its own.

With ``--ticket`` the installation is as shipped: the seeded ``ticket-assistant`` profile
with the bundled ticket tools, its claims validator and context hints, replies streamed
(``AGENTWEB_STREAM=1``); the three tools are get_order, search_kb and check_inventory on
the demo shop. Part 1 only.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_stack.py [--ticket]

The stack is started as ``make run`` starts it (``agentweb.devstack.stack_argv``: Daphne,
Celery workers with ``--threads`` threads in all, two processes on a machine of two cores
or more, beat; log level WARNING), as bench_burst starts it; ``--workers N`` starts N
worker processes at log level INFO and no beat instead (this bench's shape before; on a
2-core machine the two shapes gave part 1 the same median within the rounds' noise:
12.1x and 12.2x against 12.7x and 11.5x).

Uses a database of its own (the DATABASE_URL's name + "_bench"), created and migrated.
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
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from tests.fakes.llm_server import (  # noqa: E402
    FakeLLMServer,
    Recorded,
    Reply,
    oa_call,
    oa_call_chunks,
    oa_reply,
    oa_text_chunks,
    oa_usage_chunk,
)

EXPECTED = (
    ["run_started"]
    + ["model_called", "tool_call_started", "tool_call_finished"] * 3
    + ["model_called", "run_finished"]
)


TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
#: After each run of part 1, the bare loop runs BESIDE_SKIP + BESIDE_RUNS times and the
#: last BESIDE_RUNS count: the floor measured in the machine's state of the moment
#: (these machines' speed drifts by up to 1.5x within minutes, and the batches before and
#: after the runs may catch another phase than the runs). The skipped runs warm the
#: loop's caches up again after the stack's run, so the floor stays a warm loop's.
BESIDE_SKIP = 2
BESIDE_RUNS = 3


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def bench_database(url: str, suffix: str = "_bench") -> str:
    """A fresh database next to the one ``url`` names (dropped and created again)."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/") + suffix
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}"))


def production_settings(debug: bool) -> dict[str, str]:
    """DEBUG on as ``make run`` has it, or off as a deployment has it (the default of the
    benchmarks: with DEBUG on Django logs every query, a cost no deployment pays)."""
    if debug:
        return {"DEBUG": "1"}
    return {
        "DEBUG": "0",
        "SECRET_KEY": "bench-" + "x" * 60,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
    }


def responder(delay: float) -> Any:
    """Three lookups of the order named in the task, then an answer; by conversation."""

    def respond(req: Recorded) -> Reply:
        messages = req.json["messages"]
        task = next(m for m in messages if m["role"] == "user")["content"]
        order = task.split()[-1]
        done = sum(1 for m in messages if m["role"] == "tool")
        if done < 3:
            call = oa_call(f"c{done}", "lookup", {"order_id": f"{order}-{done}"})
            return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
        return Reply(delay=delay, json=oa_reply(content=f"Checked {order} three times."))

    return respond


def _sse(reply: dict[str, Any]) -> list[Any]:
    """A blocking OpenAI reply as the chunks a streaming provider sends."""
    message = reply["choices"][0]["message"]
    if message.get("tool_calls"):
        calls = [
            (c["id"], c["function"]["name"], json.dumps(c["function"]["arguments"]))
            for c in message["tool_calls"]
        ]
        chunks = oa_call_chunks(calls)
    else:
        chunks = oa_text_chunks(message["content"], size=16)
    return [*chunks, oa_usage_chunk()]


TICKET_CALLS = [
    ("get_order", lambda order: {"order_id": order}),
    ("search_kb", lambda order: {"query": "damaged item refund policy"}),
    ("check_inventory", lambda order: {"sku": "KIT-0101"}),
]


def ticket_responder(delay: float) -> Any:
    """The ticket tools in turn (streamed), then an answer that claims nothing."""

    def respond(req: Recorded) -> Reply:
        messages = req.json["messages"]
        task = next(m for m in messages if m["role"] == "user")["content"]
        order = task.split()[-1]
        done = sum(1 for m in messages if m["role"] == "tool")
        if done < 3:
            name, arguments = TICKET_CALLS[done]
            body = oa_reply(tool_calls=[oa_call(f"c{done}", name, arguments(order))])
        else:
            body = oa_reply(content=f"Order {order} is on record; the policy allows a refund.")
        if req.json.get("stream"):
            return Reply(delay=delay, sse=_sse(body), keep_alive=True)
        return Reply(delay=delay, json=body)

    return respond


def check_runs(
    conn: psycopg.Connection, run_ids: list[int], orders: dict[int, str], besides: tuple = ()
) -> dict[str, int]:
    """Problems of the runs; event types in ``besides`` may come between the expected ones."""
    problems = {
        "incomplete": 0,
        "misordered_or_duplicated": 0,
        "argument_mixups": 0,
        "not_succeeded": 0,
    }
    for run_id in run_ids:
        status = conn.execute("SELECT status FROM runs_run WHERE id=%s", (run_id,)).fetchone()
        if status is None or status[0] != "succeeded":
            problems["not_succeeded"] += 1
        rows = conn.execute(
            "SELECT seq, type, data FROM runs_runevent WHERE run_id=%s ORDER BY seq", (run_id,)
        ).fetchall()
        seqs = [r[0] for r in rows]
        if seqs != list(range(1, len(seqs) + 1)):
            problems["misordered_or_duplicated"] += 1
        if [r[1] for r in rows if r[1] not in besides] != EXPECTED:
            problems["incomplete"] += 1
        for seq, kind, data in rows:
            if kind == "tool_call_started" and not str(
                data["arguments"].get("order_id", orders[run_id])
            ).startswith(orders[run_id]):
                problems["argument_mixups"] += 1
    return problems


class BareLoop:
    """bench_runtime's bare httpx loop (the same 3-tool script, 4 model calls) against its
    own fake server in a child process: the floor of DESIGN §5."""

    def __init__(self) -> None:
        from tests.bench.bench_runtime import start_server

        base_url, self._proc, self._stop = start_server()
        self._url = base_url + "/chat/completions"
        self._client = httpx.Client()

    def runs(self, n: int, skip: int) -> list[float]:
        """Wall ms of ``n`` runs in a row, after ``skip`` uncounted ones (warming up)."""
        from tests.bench.bench_runtime import bare_run

        out = []
        for i in range(n + skip):
            started = time.perf_counter()
            bare_run(self._client, self._url)
            if i >= skip:
                out.append((time.perf_counter() - started) * 1000)
        return out

    def close(self) -> None:
        self._client.close()
        self._stop.send("stop")
        self._proc.join(5)


def bare_loop_ms(runs: int) -> list[float]:
    """Wall ms per run of ``runs`` bare-loop runs in a row (after 10 to warm up)."""
    bare = BareLoop()
    try:
        return bare.runs(runs, skip=10)
    finally:
        bare.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--runs", type=int, default=60)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--model-delay", type=float, default=0.2)
    parser.add_argument(
        "--workers",
        type=int,
        help="this many worker processes at log level INFO and no beat (the shape this "
        "bench had until issue 30's fifth stop); default: the stack as make run starts "
        "it (agentweb.devstack.stack_argv: the workers, beat, log level WARNING)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=8,
        help="worker threads: per --workers process, or in all as make run starts them",
    )
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument(
        "--otlp", action="store_true", help="tracing on: spans to a local OTLP sink (discarded)"
    )
    parser.add_argument(
        "--ticket",
        action="store_true",
        help="the seeded ticket-assistant profile with the ticket tools, streaming on; part 1",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="DEBUG=1 as make run has it (Django then logs every query); default: DEBUG off",
    )
    args = parser.parse_args()

    base_url = os.environ["DATABASE_URL"]
    env = dict(os.environ)
    env.update(
        DATABASE_URL=bench_database(base_url),
        **production_settings(args.debug),
        AGENTWEB_TOOLS="tools.ticket" if args.ticket else "tests.runs.sample_tools",
        AGENTWEB_STREAM="1" if args.ticket else "0",
        AGENTWEB_MODEL="openai:bench",
        OPENAI_API_KEY="bench",
        AGENTWEB_DEMO_PASSWORD="bench-password",
        LOG_LEVEL="WARNING",
    )
    os.environ.update(env)
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentweb.settings")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    if not args.debug:  # pages need the static files' manifest with DEBUG off
        call_command("collectstatic", "--noinput", verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    from django.contrib.auth import get_user_model

    from agentweb.accounts.models import ApiToken

    token = ApiToken.issue(get_user_model().objects.get(username="operator"))
    from tests.conftest import start_web, start_worker

    server = FakeLLMServer()
    sink = None
    if args.otlp:  # every process exports its spans over OTLP/HTTP, as in production
        from tests.fakes.otlp_sink import OtlpSink

        sink = OtlpSink(keep=False)
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink.endpoint
    print(f"tracing {'on (OTLP/HTTP to a local sink)' if sink else 'off'}", flush=True)
    if args.ticket:
        print("seeded ticket-assistant profile, ticket tools, streaming on", flush=True)
    server.record = False
    env["OPENAI_BASE_URL"] = server.openai_url
    tmp = Path(tempfile.mkdtemp(prefix="agentweb-bench-"))
    procs = []
    results: dict[str, Any] = {}
    try:
        from agentweb.devstack import worker_threads

        if args.workers is None:  # as make run starts it, as bench_burst does
            from tests.bench.stack_setup import make_run_stack, wait_for_web

            env["AGENTWEB_WORKER_CONCURRENCY"] = str(args.threads)
            started, url = make_run_stack(env, tmp)
            web = started["web"]
            procs += started.values()
            wait_for_web(url, web)
        else:
            web, url = start_web(env, tmp)
            procs.append(web)
            for i in range(args.workers):
                procs.append(start_worker(env, tmp, f"bench{i}", concurrency=args.threads))
        shape = (
            f"{args.workers} worker processes x {args.threads} threads (INFO), no beat"
            if args.workers is not None
            else f"as make run starts it: web, workers {worker_threads(env)} threads, beat"
        )
        print(f"stack: {shape}", flush=True)
        results["stack"] = shape
        client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        conn = psycopg.connect(env["DATABASE_URL"], autocommit=True)

        def wait_final(ids: list[int], timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                left = conn.execute(
                    "SELECT count(*) FROM runs_run WHERE id = ANY(%s) AND status NOT IN "
                    "('succeeded','failed','cancelled','waiting_approval')",
                    (ids,),
                ).fetchone()
                if left and left[0] == 0:
                    return
                time.sleep(0.02)
            raise SystemExit(f"runs did not finish in {timeout}s")

        # Part 1: one at a time, zero model latency; the bare loop measured beside it: in
        # two batches of 100, before and after, and a few runs after each stack run.
        bare_ms = bare_loop_ms(100)
        bare_loop = BareLoop()
        beside: list[float] = []
        beside_cpu = 0.0
        server.responder = ticket_responder(0.0) if args.ticket else responder(0.0)
        ids, orders = [], {}
        from tests.bench.bench_burst import BackendSampler, cpu_ticks

        own = conn.execute("SELECT pg_backend_pid()").fetchone()
        sampler = BackendSampler(env["DATABASE_URL"], exclude=own or ())
        for i in range(args.runs + 5):
            if i == 5:  # warm-up runs are not counted
                ticks = {p: cpu_ticks(p.proc.pid) or 0 for p in procs}
                bench_cpu = time.process_time()
                sampler.start()
            order = f"A{1001 + i % 25}" if args.ticket else f"S{i}"
            run = client.post("/api/runs", json={"task": f"Check order {order}"}).json()
            wait_final([run["id"]], 30)
            if i >= 5:
                ids.append(run["id"])
                orders[run["id"]] = order
                cpu_before = time.process_time()
                beside += bare_loop.runs(BESIDE_RUNS, skip=BESIDE_SKIP)
                beside_cpu += time.process_time() - cpu_before
        cpu = {"web": 0.0, "workers": 0.0, "beat": 0.0}
        for proc, before in ticks.items():
            kind = "web" if proc is web else "beat" if proc.name == "beat" else "workers"
            cpu[kind] += ((cpu_ticks(proc.proc.pid) or before) - before) * TICK_MS / len(ids)
        cpu["postgres"] = sampler.stop()[0] / len(ids)
        cpu["bench"] = (time.process_time() - bench_cpu - beside_cpu) * 1000 / len(ids)
        bare_loop.close()
        sampler.conn.close()
        rows = conn.execute(
            "SELECT extract(epoch FROM finished_at - created_at) * 1000, "
            "extract(epoch FROM started_at - created_at) * 1000 "
            "FROM runs_run WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
        ms = [float(r[0]) for r in rows]
        # created -> started: the POST's commit, the Celery message, the worker's claim;
        # started -> finished: the engine in the worker.
        waited = [float(r[1]) for r in rows]
        bare_ms += bare_loop_ms(100)
        batched = statistics.median(bare_ms)
        bare = statistics.median(beside)
        results["sequential"] = {
            "runs": len(ms),
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(pct(ms, 95), 1),
            "created_to_started_p50_ms": round(statistics.median(waited), 2),
            "started_to_finished_p50_ms": round(
                statistics.median(m - w for m, w in zip(ms, waited, strict=True)), 2
            ),
            "bare_loop_wall_p50_ms": round(bare, 2),
            "p50_over_bare_loop": round(statistics.median(ms) / bare, 1),
            "bare_loop_batched_p50_ms": round(batched, 2),
            "p50_over_batched_bare_loop": round(statistics.median(ms) / batched, 1),
            "cpu_ms_per_run": {k: round(v, 2) for k, v in cpu.items()},
            "bar_p50_over_bare_loop": 10,
            "load_average": os.getloadavg(),
            "bar_p50_ms": 50,
            # The ticket profile digests a long tool result (context_compacted) before answering.
            "problems": check_runs(
                conn, ids, orders, ("context_compacted",) if args.ticket else ()
            ),
        }
        print(
            f"whole stack, 3-tool run, zero model latency: p50 {statistics.median(ms):.1f} ms,"
            f" p95 {pct(ms, 95):.1f} ms over {len(ms)} runs (bar: p50 <= 50 ms)"
        )
        seq = results["sequential"]
        print(
            f"  of which created -> started (commit, Celery message, claim) p50 "
            f"{seq['created_to_started_p50_ms']:.1f} ms, started -> finished (the engine) p50 "
            f"{seq['started_to_finished_p50_ms']:.1f} ms"
        )
        print(
            f"  the bare httpx loop's wall time beside the runs ({BESIDE_RUNS} runs after each "
            f"run, after {BESIDE_SKIP} uncounted): p50 {bare:.2f} ms; the stack's p50 is "
            f"{seq['p50_over_bare_loop']:.1f}x that (bar: <= 10x); load average "
            + " ".join(f"{x:.2f}" for x in seq["load_average"])
        )
        print(
            f"  the bare loop in two batches of 100 (before and after the runs): p50 "
            f"{batched:.2f} ms; the stack's p50 is {seq['p50_over_batched_bare_loop']:.1f}x that"
        )
        print(
            "  CPU ms per run meanwhile (all of it, each run's POST and polling included): "
            f"web {cpu['web']:.1f}, workers {cpu['workers']:.1f}, beat {cpu['beat']:.1f}, "
            f"PostgreSQL {cpu['postgres']:.1f} "
            f"(the stack's backends), this process {cpu['bench']:.1f} (fake model, client, polling)"
        )
        print(f"  checks: {results['sequential']['problems']}")
        if args.ticket:
            return _finish(results, args.json)  # the processes stop in finally

        # Part 2: many at once with a slow model.
        server.responder = responder(args.model_delay)
        started = time.monotonic()

        def create(i: int) -> tuple[int, str]:
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
            ) as c:
                return c.post("/api/runs", json={"task": f"Check order P{i}"}).json()["id"], f"P{i}"

        with ThreadPoolExecutor(max_workers=32) as pool:
            created = list(pool.map(create, range(args.concurrent)))
        ids = [c[0] for c in created]
        orders = dict(created)
        wait_final(ids, 600)
        wall = time.monotonic() - started
        rows = conn.execute(
            "SELECT extract(epoch FROM finished_at - created_at) * 1000 "
            "FROM runs_run WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
        ms = [float(r[0]) for r in rows]
        problems = check_runs(conn, ids, orders)
        results["concurrent"] = {
            "runs": len(ids),
            "model_delay_s": args.model_delay,
            "wall_s": round(wall, 1),
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(pct(ms, 95), 1),
            "problems": problems,
        }
        print(
            f"{len(ids)} concurrent runs, {args.model_delay * 1000:.0f} ms model: all done in "
            f"{wall:.1f} s; per run p50 {statistics.median(ms):.0f} ms, p95 {pct(ms, 95):.0f} ms"
        )
        print(f"  checks: {problems}")
    finally:
        for proc in reversed(procs):
            proc.stop()
        server.close()
        if sink is not None:
            print(f"  OTLP export requests received: {sink.requests}")
            results["otlp_requests"] = sink.requests
            sink.close()
    return _finish(results, args.json)


def _finish(results: dict[str, Any], path: str | None) -> int:
    if path:
        Path(path).write_text(json.dumps(results, indent=2))
    parts = [p for p in results.values() if isinstance(p, dict) and "problems" in p]
    bad = sum(sum(part["problems"].values()) for part in parts)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
