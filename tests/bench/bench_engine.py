"""Benchmark: where one run's time goes inside a worker (issue 30.4's seeded-profile run).

The seeded ``ticket-assistant`` profile with the ticket tools and streaming on, the same
3-tool script as ``bench_stack.py --ticket`` (get_order, search_kb, check_inventory, then
an answer), a fake OpenAI-compatible model in a child process. Runs are created through
the action the API calls (``do_create_run``; no Celery message) and executed in this
process by ``engine.execute_run``, one at a time, so the figures are the engine's alone:
per run, wall time, this thread's CPU and the process's CPU (tool threads included),
each also as a multiple of a fixed piece of pure-Python work timed after every run
(these machines' speed drifts by up to 1.5x within minutes; the multiple drifts less),
statements the run's thread sent to PostgreSQL, and wall time per phase (model calls,
tool calls, the step's transaction and its parts, the budget check, setting up), from
wrappers around the engine's functions.

    python -m agentweb.devstack exec -- .venv/bin/python tests/bench/bench_engine.py [-n 100]

Figures only, no bar (the bar of the whole stack is bench_stack's). To compare two
versions, run them in turns and compare the multiples.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_stack import (  # noqa: E402
    bench_database,
    production_settings,
    ticket_responder,
)

SPENT: collections.Counter[str] = collections.Counter()
CALLS: collections.Counter[str] = collections.Counter()
#: (label, start, end) of every timed call of the run in progress (``--timeline``).
TIMELINE: list[tuple[str, float, float]] = []

_DOC = {f"k{i}": [i, str(i), {"x": i}] for i in range(300)}


def unit_of_work() -> float:
    """Thread CPU ms of a fixed piece of pure-Python work (JSON round trips, a sort)."""
    started = time.thread_time()
    for _ in range(5):
        json.loads(json.dumps(_DOC))
        sorted(str(i) for i in range(300))
    return (time.thread_time() - started) * 1000


def cpu_by_thread() -> collections.Counter[str]:
    """CPU seconds of this process's threads so far, by thread name (Linux: /proc), the
    numbered threads of a pool under one name."""
    out: collections.Counter[str] = collections.Counter()
    tick = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    for task in Path("/proc/self/task").iterdir():
        name = names.get(int(task.name), "(not a Python thread)")
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[name.rstrip("0123456789_-")] += (int(fields[11]) + int(fields[12])) / tick
    return out


def timed(owner: Any, name: str, label: str) -> None:
    """Count the wall time of ``owner.name`` (a function or method) under ``label``."""
    fn: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            ended = time.perf_counter()
            SPENT[label] += ended - started
            CALLS[label] += 1
            TIMELINE.append((label, started, ended))

    setattr(owner, name, wrapper)


def _serve(conn: Any) -> None:
    from tests.fakes.llm_server import FakeLLMServer

    server = FakeLLMServer()
    server.record = False
    server.responder = ticket_responder(0.0)
    conn.send(server.openai_url)
    conn.recv()
    server.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--runs", type=int, default=100)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument(
        "--timeline", action="store_true", help="also print the median run's phases in order"
    )
    args = parser.parse_args()

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(child,), daemon=True)
    server.start()
    os.environ.update(
        DATABASE_URL=bench_database(os.environ["DATABASE_URL"], "_engine"),
        **production_settings(False),
        AGENTWEB_TOOLS="tools.ticket",
        AGENTWEB_STREAM="1",
        AGENTWEB_MODEL="openai:bench",
        OPENAI_API_KEY="bench",
        OPENAI_BASE_URL=parent.recv(),
        AGENTWEB_DEMO_PASSWORD="bench-password",
        LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="agentweb.settings",
    )
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.db.backends.base.base import BaseDatabaseWrapper

    call_command("migrate", "--noinput", verbosity=0)
    with open(os.devnull, "w") as quiet:
        call_command("seed_demo", stdout=quiet)

    from agentweb.budgets import check
    from agentweb.runs import actions, batch, engine, leases, lifecycle, queue, store, versions
    from agentweb.runtime import loop, turns
    from agentweb.runtime import openai as openai_model

    queue.send = lambda *a, **k: None  # executed here, not by a worker
    for owner, name, label in [
        (engine, "_persist", "step's transaction (all)"),
        (engine, "_lock_run", "  row lock (+ BEGIN)"),
        (batch.Batch, "send", "  the step's writes, one execute"),
        (batch, "_bound", "    statements bound (client)"),
        (store, "append_events", "  events built, hooks"),
        (BaseDatabaseWrapper, "commit", "  COMMIT"),
        (BaseDatabaseWrapper, "run_and_clear_commit_hooks", "  after-commit work"),
        (loop.Agent, "_call_model", "model call (all)"),
        (openai_model.OpenAIChatModel, "stream", "  HTTP and parsing"),
        (check.Check, "exceeded", "budget check"),
        (lifecycle, "claim_and_read", "claim, with the run's read"),
        (engine, "build_agent", "agent built"),
        (versions, "profile_for_run", "profile version"),
        (leases.LeaseKeeper, "hold", "lease held (advisory lock)"),
        (turns.Turns, "resume", "tool calls"),
    ]:
        timed(owner, name, label)

    statements = [0]

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements[0] += 1
        return execute(sql, params, many, context)

    user = get_user_model().objects.get(username="operator")
    walls, cpus, procs, units, sent = [], [], [], [], []
    timelines: list[tuple[float, float, list[tuple[str, float, float]]]] = []
    warm = 5
    threads_before: collections.Counter[str] = collections.Counter()
    for i in range(args.runs + warm):
        if i == warm:
            SPENT.clear()
            CALLS.clear()
            threads_before = cpu_by_thread()
        run = actions.do_create_run(user=user, task=f"Check order A{1001 + i % 25}")
        before = statements[0]
        TIMELINE.clear()
        wall, cpu, proc = time.perf_counter(), time.thread_time(), time.process_time()
        with connection.execute_wrapper(count):
            status = engine.execute_run(run.pk)
        if status != "succeeded":
            print(f"run {run.pk} ended {status}")
            return 1
        if i >= warm:
            walls.append((time.perf_counter() - wall) * 1000)
            timelines.append((walls[-1], wall, list(TIMELINE)))
            cpus.append((time.thread_time() - cpu) * 1000)
            procs.append((time.process_time() - proc) * 1000)
            sent.append(statements[0] - before)
            units.append(unit_of_work())
    threads = cpu_by_thread()
    threads.subtract(threads_before)
    parent.send("stop")
    unit = statistics.median(units)
    results = {
        "runs": args.runs,
        "wall_p50_ms": round(statistics.median(walls), 2),
        "thread_cpu_p50_ms": round(statistics.median(cpus), 2),
        "process_cpu_p50_ms": round(statistics.median(procs), 2),
        "unit_of_work_ms": round(unit, 3),
        "wall_in_units": round(statistics.median(walls) / unit, 2),
        "thread_cpu_in_units": round(statistics.median(cpus) / unit, 2),
        "statements_per_run": statistics.median(sent),
        "phases_ms_per_run": {k: round(v * 1000 / args.runs, 2) for k, v in SPENT.items()},
        "cpu_ms_per_run_by_thread": {
            k: round(v * 1000 / args.runs, 2) for k, v in threads.most_common() if v > 0
        },
        "load_average": os.getloadavg(),
    }
    print(
        f"execute_run of the seeded ticket-assistant's 3-tool run, {args.runs} runs: wall p50 "
        f"{results['wall_p50_ms']} ms, this thread's CPU {results['thread_cpu_p50_ms']} ms, "
        f"the process's {results['process_cpu_p50_ms']} ms; {results['statements_per_run']} "
        "statements per run from the run's thread (tool threads and the lease keeper not counted)"
    )
    print(
        f"  in units of a fixed piece of work ({unit:.2f} ms here): wall "
        f"{results['wall_in_units']}, thread CPU {results['thread_cpu_in_units']}; load "
        + " ".join(f"{x:.2f}" for x in results["load_average"])
    )
    print("  wall ms per run, by phase (calls per run):")
    for label, spent in SPENT.most_common():
        print(f"    {spent * 1000 / args.runs:7.2f}  {label} ({CALLS[label] / args.runs:.1f})")
    print("  CPU ms per run, by thread (from /proc, in clock ticks: a mean over the runs):")
    for label, spent in results["cpu_ms_per_run_by_thread"].items():
        print(f"    {spent:7.2f}  {label}")
    if args.timeline:
        took, began, phases = sorted(timelines)[len(timelines) // 2]
        print(f"  the median run ({took:.2f} ms), its timed calls in order (start, length, ms):")
        for label, started, ended in sorted(phases, key=lambda p: p[1]):
            print(f"    {(started - began) * 1000:7.2f} {(ended - started) * 1000:6.2f}  {label}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
