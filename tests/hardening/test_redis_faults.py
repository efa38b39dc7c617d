"""Redis killed -9 mid-run and started again empty.

The test starts its own redis-server on a free port, a web process, a worker and beat on
it, and kills Redis while every worker thread is busy with a run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentweb.runs.models import Run, RunEvent
from tests.conftest import Proc, start_beat, start_web, wait_for
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply
from tests.hardening.redis_server import RedisServer

pytestmark = pytest.mark.e2e


def slow_script(delay: float) -> Any:
    """Two model calls a run, each taking ``delay``: look something up, then answer."""

    def respond(req: Recorded) -> Reply:
        tools = [m for m in req.json["messages"] if m["role"] == "tool"]
        if not tools:
            call = oa_call("c-1", "search_kb", {"query": "damaged item refund"})
            return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
        return Reply(delay=delay, json=oa_reply(content="All done."))

    return respond


def start_production_worker(env: dict[str, str], tmp: Any) -> Proc:
    """A worker started as docker-compose starts one: gossip, mingle and heartbeats on."""
    proc = Proc(
        "worker",
        [sys.executable, "-m", "celery", "-A", "agentweb", "worker", "-P", "threads", "-c", "4"]
        + ["-l", "INFO", "-n", f"faults-{os.getpid()}@%h"],
        env,
        tmp / "worker.log",
    )
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
    llm.responder = slow_script(1.5)
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
    worker = start_production_worker(env, tmp_path)
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


def test_redis_kill_9_mid_run_no_worker_dies_and_runs_finish(
    faulty_stack: dict[str, Any], redis: RedisServer
) -> None:
    client = httpx.Client(base_url=faulty_stack["url"], headers=_token("operator"), timeout=10)
    ids = []
    for i in range(4):
        created = client.post("/api/runs", json={"task": f"Customer {i}: item arrived damaged"})
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    # Every worker thread is inside a run (waiting for the slow model) when Redis dies.
    wait_for(lambda: Run.objects.filter(pk__in=ids, status="running").count() == 4, 30)
    follower = Follower(faulty_stack["url"], ids[0], _session_cookie("operator"))
    wait_for(lambda: follower.first("state", 0), 10)
    killed = time.monotonic()
    redis.kill9()
    time.sleep(1.0)

    # While Redis is down a run is still stored and answered 201, quickly.
    started = time.monotonic()
    during = client.post("/api/runs", json={"task": "Created while Redis is down"})
    answered_in = time.monotonic() - started
    assert during.status_code == 201, during.text
    assert answered_in < 5, answered_in
    ids.append(during.json()["id"])
    time.sleep(2.0)

    # The open page was told the live feed is interrupted (it shows "reconnecting").
    assert follower.first("live", killed, ok=False) is not None, follower.messages[-3:]
    stored_meanwhile = RunEvent.objects.filter(run_id=ids[0]).count()
    redis.start()  # empty: every queue, unacked message and group membership is gone
    back = time.monotonic()
    # ... and resumes within 5 s: live again, and what was stored meanwhile arrives.
    wait_for(lambda: follower.first("live", back, ok=True), 10)
    resumed = follower.first("live", back, ok=True)
    assert resumed is not None and resumed - back < 5, resumed and resumed - back
    wait_for(lambda: max(follower.seqs_after(0), default=0) >= stored_meanwhile, 10)
    worker: Proc = faulty_stack["worker"]
    wait_for(lambda: Run.objects.filter(pk__in=ids, status__in=Run.FINAL).count() == 5, 60)
    assert time.monotonic() - back < 45
    statuses = dict(Run.objects.filter(pk__in=ids).values_list("pk", "status"))
    assert set(statuses.values()) == {"succeeded"}, statuses
    # ... and the worker is alive and still takes work after the restart.
    log = worker.output()
    assert worker.proc.poll() is None, log[-3000:]
    assert "Unrecoverable error" not in log, log[-3000:]
    after = client.post("/api/runs", json={"task": "After the restart"}).json()["id"]
    run = wait_for(lambda: Run.objects.filter(pk=after, status__in=Run.FINAL).first(), 30)
    assert run.status == "succeeded"
    assert worker.proc.poll() is None
    # The page got every event of its run, in order, over the one socket it opened.
    total = RunEvent.objects.filter(run_id=ids[0]).count()
    wait_for(lambda: max(follower.seqs_after(0), default=0) >= total, 10)
    assert sorted(set(follower.seqs_after(0))) == list(range(1, total + 1))
    assert follower.closed is None, follower.closed
    follower.stop()
