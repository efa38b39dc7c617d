"""Redis killed -9 mid-run and started again empty, three times in a row.

The test starts its own redis-server (TCP, and a unix socket as `make run`'s embedded
Redis), a web process, beat, and a worker started with the README's own command line,
and kills Redis while runs are in flight and a run page's socket is open.

The worker has free threads when Redis dies (a few runs on eight threads, as under `make
run`): its task channel is then inside a BRPOP with late-acked messages, the state in
which kombu's close path used to raise ``AttributeError: 'NoneType' object has no
attribute 'hostname'`` and kill the worker (agentweb/broker.py). A worker whose every
thread is busy does not poll, and survived: the earlier version of this test (four runs
on four threads, one kill) passed with the bug in place."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentweb.runs.models import Run, RunEvent
from tests.conftest import ROOT, Proc, start_beat, start_web, wait_for
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply
from tests.hardening.redis_server import RedisServer

pytestmark = pytest.mark.e2e

KILLS = 3
LONG_STEPS = 18  # the followed run's tool calls: it outlives the three outages


def script(req: Recorded) -> Reply:
    """Short runs: two model calls of 1.5 s. The LONGRUN one: LONG_STEPS look-ups of 3 s
    each, then the answer."""
    messages = req.json["messages"]
    done = sum(1 for m in messages if m["role"] == "tool")
    task = next(str(m["content"]) for m in messages if m["role"] == "user")
    steps, delay = (LONG_STEPS, 3.0) if "LONGRUN" in task else (1, 1.5)
    if done < steps:
        call = oa_call(f"c-{done}", "search_kb", {"query": f"damaged item refund {done}"})
        return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
    return Reply(delay=delay, json=oa_reply(content="All done."))


def readme_worker_command() -> list[str]:
    """The worker command line the README tells people to run on any machine."""
    readme = (Path(ROOT) / "README.md").read_text()
    found = re.search(r"`(celery -A agentweb worker [^`]+)`", readme)
    assert found, "the README no longer shows a worker command line"
    return shlex.split(found.group(1))


def start_readme_worker(env: dict[str, str], tmp: Any) -> Proc:
    argv = readme_worker_command()
    # As the README says it, plus INFO logs to see it become ready.
    proc = Proc("worker", [sys.executable, "-m", *argv, "-l", "INFO"], env, tmp / "worker.log")
    wait_for(lambda: "ready." in proc.output() or proc.proc.poll() is not None, 60, 0.1)
    assert proc.proc.poll() is None, proc.output()
    return proc


@pytest.fixture(params=["tcp", "unix"])
def redis(request: Any, tmp_path: Any) -> Iterator[RedisServer]:
    # make run's embedded Redis listens on a unix socket; docker-compose's on TCP.
    server = RedisServer(tmp_path, unix=request.param == "unix").start()
    yield server
    server.stop()


@pytest.fixture
def faulty_stack(
    demo: Any, redis: RedisServer, stack_env: dict[str, str], tmp_path: Any
) -> Iterator[dict[str, Any]]:
    llm = FakeLLMServer().__enter__()
    llm.responder = script
    llm.record = False
    env = {
        **stack_env,
        "REDIS_URL": redis.url,
        "AGENTWEB_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_LEASE_SECONDS": "4",
        "AGENTWEB_QUEUE": f"redis-faults-{os.getpid()}",
    }
    web, url = start_web(env, tmp_path)
    worker = start_readme_worker(env, tmp_path)
    beat = start_beat(env, tmp_path)
    procs = {"web": web, "worker": worker, "beat": beat}
    yield {"url": url, "env": env, "llm": llm, **procs}
    for proc in procs.values():
        proc.stop()
    llm.__exit__(None, None, None)


class Follower:
    """A browser's run socket on its own thread: every message with the time it came."""

    def __init__(self, url: str, run_id: int, cookie: str) -> None:
        self.messages: list[tuple[float, dict[str, Any]]] = []
        self.closed: Any = None
        ws_url = url.replace("http://", "ws://") + f"/ws/runs/{run_id}/?after=0"
        headers = {"Cookie": cookie, "Origin": url}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, args=(ws_url, headers), daemon=True)
        self.thread.start()

    def _run(self, ws_url: str, headers: dict[str, str]) -> None:
        self.loop.run_until_complete(self._follow(ws_url, headers))

    async def _follow(self, ws_url: str, headers: dict[str, str]) -> None:
        from websockets.asyncio.client import connect

        try:
            async with connect(ws_url, additional_headers=headers) as ws:
                self.ws = ws
                async for raw in ws:
                    self.messages.append((time.monotonic(), json.loads(raw)))
        except Exception as exc:  # recorded: the test asserts the socket stayed open
            self.closed = exc

    def seqs_after(self, t: float) -> list[int]:
        return [
            e["seq"]
            for at, m in self.messages
            if at >= t and m["kind"] == "events"
            for e in m["events"]
        ]

    def first(self, kind: str, since: float, **match: Any) -> float | None:
        for at, m in self.messages:
            if at >= since and m["kind"] == kind and all(m.get(k) == v for k, v in match.items()):
                return at
        return None

    def stop(self) -> None:
        if hasattr(self, "ws"):
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self.ws.close(), self.loop).result(10)
        self.thread.join(5)


def _session_cookie(username: str) -> str:
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return f"sessionid={client.cookies['sessionid'].value}"


def _token(username: str) -> dict[str, str]:
    from django.contrib.auth import get_user_model

    from agentweb.accounts.models import ApiToken

    user = get_user_model().objects.get(username=username)
    return {"Authorization": f"Bearer {ApiToken.issue(user)}"}


def test_redis_kill_9_three_times_no_worker_dies_and_runs_finish(
    faulty_stack: dict[str, Any], redis: RedisServer
) -> None:
    client = httpx.Client(base_url=faulty_stack["url"], headers=_token("operator"), timeout=10)
    worker: Proc = faulty_stack["worker"]

    def create(task: str) -> int:
        created = client.post("/api/runs", json={"task": task})
        assert created.status_code == 201, created.text
        return int(created.json()["id"])

    followed = create("LONGRUN: a look into a damaged item")
    wait_for(lambda: Run.objects.filter(pk=followed, status="running").exists(), 30)
    follower = Follower(faulty_stack["url"], followed, _session_cookie("operator"))
    wait_for(lambda: follower.first("state", 0), 10)
    ids = [followed]
    first_kill = 0.0
    for round_ in range(KILLS):
        # A few runs in flight, fewer than the worker's threads: it still polls for more.
        batch = [create(f"Customer {round_}-{i}: item arrived damaged") for i in range(3)]
        ids += batch
        wait_for(lambda b=batch: Run.objects.filter(pk__in=b, status="running").count() == 3, 30)
        killed = time.monotonic()
        first_kill = first_kill or killed
        redis.kill9()
        time.sleep(1.0)

        # While Redis is down a run is still stored and answered 201, quickly.
        started = time.monotonic()
        outage_run = create(f"Created while Redis is down ({round_})")
        assert time.monotonic() - started < 5
        ids.append(outage_run)
        time.sleep(2.0)
        assert "Unrecoverable error" not in worker.output(), worker.output()[-3000:]
        assert worker.proc.poll() is None, worker.output()[-3000:]

        # The open page was told the live feed is interrupted (it shows "reconnecting").
        assert follower.first("live", killed, ok=False) is not None, follower.messages[-3:]
        stored_meanwhile = RunEvent.objects.filter(run_id=followed).count()
        redis.start()  # empty: every queue, unacked message and group membership is gone
        back = time.monotonic()
        # The page is live again within 5 s, and what was stored meanwhile arrives ...
        wait_for(lambda b=back: follower.first("live", b, ok=True), 10)
        resumed = follower.first("live", back, ok=True)
        assert resumed is not None and resumed - back < 5, resumed and resumed - back
        wait_for(lambda n=stored_meanwhile: max(follower.seqs_after(0), default=0) >= n, 5)
        # ... and so does the next event stored after Redis's return, within 5 s of it.
        later = RunEvent.objects.filter(run_id=followed).count() + 1
        wait_for(lambda n=later: RunEvent.objects.filter(run_id=followed).count() >= n, 10)
        stored_at = time.monotonic()
        wait_for(lambda n=later: max(follower.seqs_after(0), default=0) >= n, 5)
        assert time.monotonic() - stored_at < 5
        # The run created during the outage starts within 30 s of Redis's return.
        wait_for(lambda r=outage_run: Run.objects.filter(pk=r).exclude(status="queued"), 30)
        assert time.monotonic() - back < 30
        assert worker.proc.poll() is None, worker.output()[-3000:]

    wait_for(lambda: Run.objects.filter(pk__in=ids, status__in=Run.FINAL).count() == len(ids), 90)
    statuses = dict(Run.objects.filter(pk__in=ids).values_list("pk", "status"))
    assert set(statuses.values()) == {"succeeded"}, statuses
    # No worker exit in the 60 s after the first kill, nor later; it still takes work.
    wait_for(lambda: time.monotonic() - first_kill >= 60, 70, 0.5)
    log = worker.output()
    assert worker.proc.poll() is None, log[-3000:]
    assert "Unrecoverable error" not in log, log[-3000:]
    after = create("After the restarts")
    run = wait_for(lambda: Run.objects.filter(pk=after, status__in=Run.FINAL).first(), 30)
    assert run.status == "succeeded"
    assert worker.proc.poll() is None
    # The page got every event of its run, in order, over the one socket it opened.
    total = RunEvent.objects.filter(run_id=followed).count()
    assert total >= 2 * LONG_STEPS, total
    wait_for(lambda: max(follower.seqs_after(0), default=0) >= total, 10)
    assert sorted(set(follower.seqs_after(0))) == list(range(1, total + 1))
    assert follower.closed is None, follower.closed
    follower.stop()
