"""Redis killed -9 mid-run and started again empty.

The test starts its own redis-server on a free port, a web process, a worker and beat on
it, and kills Redis while every worker thread is busy with a run."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentweb.runs.models import Run
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

    redis.start()  # empty: every queue, unacked message and group membership is gone
    back = time.monotonic()
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
