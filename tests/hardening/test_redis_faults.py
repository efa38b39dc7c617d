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

import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentweb.runs.models import Run, RunEvent
from tests.conftest import ROOT, Proc, start_beat, start_web, wait_for
from tests.fakes.llm_server import FakeLLMServer
from tests.hardening import outages
from tests.hardening.redis_server import RedisServer

pytestmark = pytest.mark.e2e


def readme_worker_command() -> list[str]:
    """The worker command line the README tells people to run on any machine."""
    readme = (ROOT / "README.md").read_text()
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
    llm.responder = outages.script
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

    def back_after_an_outage() -> None:
        time.sleep(2.0)  # the worker retries its connection meanwhile
        redis.start()  # empty: every queue, unacked message and group membership is gone

    def check_worker() -> None:
        log = worker.output()
        assert "Unrecoverable error" not in log, log[-3000:]
        assert worker.proc.poll() is None, log[-3000:]
        # An outage is told in lines, not tracebacks (agentweb/broker.py BrokerAwayFilter):
        # beat's unsent schedule, the worker's late acks, the metrics' flushes.
        for proc in (worker, faulty_stack["beat"]):
            said = proc.output()
            assert "Traceback" not in said, said[said.find("Traceback") - 300 :][:3000]
            # and once per outage at most, not at every attempt (agentweb/outages.py)
            for line in ("could not acknowledge task", "the broker is away", "metrics to Redis"):
                assert said.count(line) <= 3, [s for s in said.splitlines() if line in s]
        # Nor Celery's 8-line notice about its coming default (settings say ours).
        assert "worker_cancel_long_running_tasks_on_connection_loss" not in log

    stack = outages.Stack(
        create=create,
        status=lambda run: str(Run.objects.get(pk=run).status),
        stored=lambda run: RunEvent.objects.filter(run_id=run).count(),
        kill_redis=redis.kill9,
        redis_back=back_after_an_outage,
        check_worker=check_worker,
    )
    cookie = _session_cookie("operator")
    followed, follower = outages.follow_a_long_run(stack, faulty_stack["url"], cookie)
    ids, first_kill = outages.outages(stack, followed, follower)
    outages.all_done(stack, followed, follower, ids, first_kill)
