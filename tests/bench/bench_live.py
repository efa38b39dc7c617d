"""Benchmark: WebSocket clients following runs while they run.

Starts Daphne and (once every client is connected) a real Celery worker against the
database and Redis of the environment, creates runs on the demo tickets with the demo
model, opens N WebSocket clients spread over the runs, approves each call the runs ask
for as a second user, and measures for every event that was stored after a client
connected the latency from the event's commit time (RunEvent.at, set just before commit)
to its arrival at the client. Then checks that each client got every seq of its run
exactly once and in order.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python tests/bench/bench_live.py \
        [--clients 200] [--runs 40] [--json out.json] [--check]

Bar: step stored → browser p95 <= 50 ms with 200 sockets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# A database of its own (fresh, migrated below), so the demo's data is left alone.
if "DATABASE_URL" in os.environ and "--keep-db" not in sys.argv:
    from tests.bench.bench_stack import bench_database

    os.environ["DATABASE_URL"] = bench_database(os.environ["DATABASE_URL"], "_live")
os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentweb.settings")
os.environ.setdefault("AGENTWEB_DEMO_PASSWORD", "demo-pass-123")

import django  # noqa: E402

django.setup()

import websockets  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from agentweb.runs import actions  # noqa: E402
from agentweb.runs.models import Approval, Run, RunEvent  # noqa: E402
from agentweb.tickets.models import Ticket  # noqa: E402
from tests.conftest import start_web, start_worker  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply  # noqa: E402

BAR_P95_MS = 50.0


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


class Follower:
    """One WebSocket client: records (seq, arrival time) for everything it receives."""

    def __init__(self, url: str, run_id: int, cookie: str) -> None:
        self.url, self.run_id, self.cookie = url, run_id, cookie
        self.received: list[tuple[int, float]] = []
        self.read_at: dict[int, float] = {}
        self.connected_at = 0.0
        self.done = asyncio.Event()
        self.error = ""

    async def follow(self, ready: asyncio.Event, deadline: float) -> None:
        origin = self.url.replace("ws://", "http://").split("/ws/")[0]
        try:
            async with websockets.connect(
                self.url,
                additional_headers={"Cookie": self.cookie, "Origin": origin},
                max_size=None,
                open_timeout=30,
            ) as ws:
                self.connected_at = time.time()
                ready.set()
                while time.time() < deadline:
                    raw = await asyncio.wait_for(ws.recv(), timeout=deadline - time.time())
                    now = time.time()
                    msg = json.loads(raw)
                    if msg["kind"] == "events":
                        self.received.extend((e["seq"], now) for e in msg["events"])
                        for e in msg["events"]:
                            self.read_at[e["seq"]] = msg.get("read_at", now)
                    elif msg["kind"] == "state" and not msg["active"]:
                        last = self.received[-1][0] if self.received else 0
                        if last >= msg["last_seq"]:
                            break
        except Exception as exc:  # reported, counted as a failure
            self.error = f"{type(exc).__name__}: {exc}"
            ready.set()
        finally:
            self.done.set()


def paced_model(delay_s: float) -> Any:
    """A model with a real model's pace (each call takes ``delay_s`` +-50 %): look up the
    order, search the KB, answer."""

    def respond(req: Recorded) -> Reply:
        messages = req.json["messages"]
        task = next(m for m in messages if m["role"] == "user")["content"]
        order = re.search(r"A\d{4}", task)
        done = [m for m in messages if m["role"] == "tool"]
        if not done:
            body = oa_reply(
                tool_calls=[oa_call("c-1", "get_order", {"order_id": order[0] if order else ""})]
            )
        elif len(done) == 1:
            body = oa_reply(tool_calls=[oa_call("c-2", "search_kb", {"query": "delivery times"})])
        else:
            body = oa_reply(content="Your order is on its way; it should arrive within 3 days.")
        # Real model calls do not all take the same time: +-50 % keeps 40 runs from
        # stepping in lockstep.
        return Reply(delay=delay_s * random.uniform(0.5, 1.5), json=body)

    return respond


def approve_loop(run_ids: list[int], approver: Any, stop: threading.Event) -> int:
    decided = 0
    while not stop.is_set():
        pending = list(
            Approval.objects.filter(run_id__in=run_ids, status="pending").values_list(
                "pk", flat=True
            )
        )
        for pk in pending:
            try:
                actions.do_decide_approval(approval_id=pk, user=approver, decision="approve")
                decided += 1
            except actions.ActionError:
                pass
        if not Run.objects.filter(pk__in=run_ids, status__in=Run.ACTIVE).exists():
            break
        time.sleep(0.02)
    return decided


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    User = get_user_model()
    await asyncio.to_thread(call_command, "migrate", "--noinput", verbosity=0)
    if not await asyncio.to_thread(User.objects.filter(username="operator").exists):
        await asyncio.to_thread(call_command, "seed_demo")
    operator = await asyncio.to_thread(User.objects.get, username="operator")
    approver = await asyncio.to_thread(User.objects.get, username="approver")

    client = Client()
    await asyncio.to_thread(client.force_login, operator)
    cookie = f"sessionid={client.cookies['sessionid'].value}"

    env = dict(os.environ)
    llm = None
    if args.model_ms > 0:
        llm = FakeLLMServer()
        llm.record = False
        llm.responder = paced_model(args.model_ms / 1000)
        env.update(
            AGENTWEB_MODEL="openai:fake-model",
            OPENAI_BASE_URL=llm.openai_url,
            OPENAI_API_KEY="bench-key",
            AGENTWEB_STREAM="0",
        )
    else:
        env["AGENTWEB_MODEL"] = "demo"
    os.environ["AGENTWEB_MODEL"] = env["AGENTWEB_MODEL"]
    from django.conf import settings

    settings.AGENTWEB_MODEL = env["AGENTWEB_MODEL"]  # the model each new run records
    tmp = Path(tempfile.mkdtemp(prefix="bench-live-"))
    if args.web:
        web, url = None, args.web.rstrip("/")
    else:
        web, url = await asyncio.to_thread(start_web, env, tmp)
    worker = None
    try:
        tickets = await asyncio.to_thread(
            lambda: list(Ticket.objects.filter(status="open").values_list("pk", flat=True))
        )
        # The runs are queued now; nothing executes them until the worker starts below.
        runs = []
        for i in range(args.runs):
            if llm is not None:
                task, ticket = f"Where is order A{1001 + i % 40}?", None
            else:
                task, ticket = "", tickets[i % len(tickets)]
            run = await asyncio.to_thread(
                actions.do_create_run, user=operator, task=task, ticket_id=ticket
            )
            runs.append(run.pk)
        ws_base = url.replace("http://", "ws://")
        followers = [
            Follower(
                f"{ws_base}/ws/runs/{runs[i % len(runs)]}/?after=0", runs[i % len(runs)], cookie
            )
            for i in range(args.clients)
        ]
        deadline = time.time() + args.timeout
        readies = [asyncio.Event() for _ in followers]
        tasks = [
            asyncio.create_task(f.follow(r, deadline))
            for f, r in zip(followers, readies, strict=True)
        ]
        await asyncio.gather(*(r.wait() for r in readies))
        connect_errors = [f.error for f in followers if f.error]
        # An observer on the channel layer: when does the wake-up for each stored step reach
        # a subscriber? That part (worker commit → publish → Redis) is before any consumer.
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        observer = await layer.new_channel()
        for run_id in runs:
            await layer.group_add(f"run-{run_id}", observer)
        wakeups: dict[tuple[int, int], float] = {}

        async def observe() -> None:
            while True:
                msg = await layer.receive(observer)
                if msg.get("type") == "run.event":
                    wakeups.setdefault((msg["run"], msg["seq"]), time.time())

        observing = asyncio.create_task(observe())
        started = time.time()
        worker = await asyncio.to_thread(start_worker, env, tmp, "bench-worker", args.concurrency)
        stop = threading.Event()
        approvals = asyncio.create_task(asyncio.to_thread(approve_loop, runs, approver, stop))
        await asyncio.gather(*tasks)
        stop.set()
        decided = await approvals
        elapsed = time.time() - started
        observing.cancel()

        stored = await asyncio.to_thread(
            lambda: {
                (e.run_id, e.seq): e.at.timestamp()
                for e in RunEvent.objects.filter(run_id__in=runs).only("run_id", "seq", "at")
            }
        )
        statuses = await asyncio.to_thread(
            lambda: dict(Run.objects.filter(pk__in=runs).values_list("pk", "status"))
        )
        last_seq = {
            run_id: max((s for (r, s) in stored if r == run_id), default=0) for run_id in runs
        }
        to_wakeup = [(woke - stored[key]) * 1000 for key, woke in wakeups.items() if key in stored]
        latencies: list[float] = []
        to_read: list[float] = []  # commit → the server read it (wake-up + query)
        to_client: list[float] = []  # the server read it → arrival (render, send, client)
        missing = repeated = out_of_order = 0
        bad_clients = 0
        for f in followers:
            seqs = [s for s, _ in f.received]
            expected = list(range(1, last_seq[f.run_id] + 1))
            ok = True
            if len(seqs) != len(set(seqs)):
                repeated += len(seqs) - len(set(seqs))
                ok = False
            if sorted(set(seqs)) != expected:
                missing += len(set(expected) - set(seqs))
                ok = False
            if seqs != sorted(seqs):
                out_of_order += 1
                ok = False
            if f.error:
                ok = False
            bad_clients += 0 if ok else 1
            for seq, arrived in f.received:
                at = stored.get((f.run_id, seq))
                if at is not None and at > f.connected_at:
                    latencies.append((arrived - at) * 1000)
                    read = f.read_at.get(seq, arrived)
                    to_read.append((read - at) * 1000)
                    to_client.append((arrived - read) * 1000)
        result = {
            "model": env["AGENTWEB_MODEL"] + (f" ({args.model_ms:g} ms per call)" if llm else ""),
            "clients": args.clients,
            "runs": args.runs,
            "run_statuses": {str(k): v for k, v in statuses.items()},
            "events_stored": len(stored),
            "deliveries_measured": len(latencies),
            "approvals_decided": decided,
            "seconds": round(elapsed, 2),
            "latency_ms": {
                "p50": round(statistics.median(latencies), 2) if latencies else None,
                "p95": round(percentile(latencies, 95), 2),
                "p99": round(percentile(latencies, 99), 2),
                "max": round(max(latencies), 2) if latencies else None,
            },
            "commit_to_wakeup_ms": {
                "p50": round(statistics.median(to_wakeup), 2) if to_wakeup else None,
                "p95": round(percentile(to_wakeup, 95), 2),
                "note": "last step of each stored batch; before any consumer runs",
            },
            "commit_to_server_read_ms": {
                "p50": round(statistics.median(to_read), 2) if to_read else None,
                "p95": round(percentile(to_read, 95), 2),
            },
            "server_read_to_client_ms": {
                "p50": round(statistics.median(to_client), 2) if to_client else None,
                "p95": round(percentile(to_client, 95), 2),
            },
            "missing_events": missing,
            "repeated_events": repeated,
            "clients_out_of_order": out_of_order,
            "clients_with_problems": bad_clients,
            "connect_errors": connect_errors[:5],
            "client_errors": [f.error for f in followers if f.error][:5],
            "bar_p95_ms": BAR_P95_MS,
        }
        return result
    finally:
        if worker is not None:
            worker.stop()
        if web is not None:
            web.stop()
        if llm is not None:
            llm.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=8, help="worker threads")
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument(
        "--model-ms",
        type=float,
        default=200.0,
        help="latency of each model call of a local fake model (0: the instant demo model, "
        "whose runs fire all their steps at once and pause for approvals)",
    )
    parser.add_argument("--web", help="use this running web server (same database and Redis)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument(
        "--keep-db",
        action="store_true",
        help="use DATABASE_URL as it is instead of a fresh *_live database",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a bar is missed")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    lat = result["latency_ms"]
    print(
        f"live: model {result['model']}, {result['clients']} clients on {result['runs']} runs, "
        f"{result['events_stored']} events stored, {result['deliveries_measured']} live "
        f"deliveries measured in {result['seconds']} s"
    )
    print(
        f"  commit → client latency: p50 {lat['p50']} ms, p95 {lat['p95']} ms, "
        f"p99 {lat['p99']} ms, max {lat['max']} ms (bar: p95 <= {BAR_P95_MS} ms)"
    )
    split_a, split_b = result["commit_to_server_read_ms"], result["server_read_to_client_ms"]
    wake = result["commit_to_wakeup_ms"]
    print(
        f"  commit → channel-layer wake-up (worker and Redis, before any consumer): "
        f"p50 {wake['p50']} / p95 {wake['p95']} ms"
    )
    print(
        f"  of which commit → server read: p50 {split_a['p50']} / p95 {split_a['p95']} ms; "
        f"server read → client: p50 {split_b['p50']} / p95 {split_b['p95']} ms"
    )
    print(
        f"  missing {result['missing_events']}, repeated {result['repeated_events']}, "
        f"out of order {result['clients_out_of_order']} clients, "
        f"clients with problems {result['clients_with_problems']}"
    )
    print(f"  run statuses: {sorted(set(result['run_statuses'].values()))}")
    if result["client_errors"]:
        print(f"  client errors: {result['client_errors']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    complete = (
        result["missing_events"] == 0
        and result["repeated_events"] == 0
        and result["clients_with_problems"] == 0
    )
    if not complete:
        print("FAIL: some client missed, repeated or reordered an event")
        return 1
    if args.check and not (lat["p95"] is not None and lat["p95"] <= BAR_P95_MS):
        print("FAIL: p95 above the bar")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
