"""MCP servers with the real stack: web, beat and Celery worker processes, a fake model
over HTTP and our faulty server started by the worker over stdio.

A server added through the API while everything runs is usable within seconds; a
high-risk call of its waits for a person and runs once, with a worker killed -9 in
between; a worker that dies right after the call leaves the call to a person, and the
server sees the same idempotency key again; crashes, garbage and hangs fail their calls
and the worker lives on, its server sees none of the worker's secrets, its stderr is in
the worker's log, and a tool list it changes is read again.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentweb.mcpservers.models import McpServer
from agentweb.runs import faults
from agentweb.runs.models import Approval, Run, RunEvent, ToolExecution
from tests.conftest import Proc, start_beat, start_web, start_worker, wait_for
from tests.fakes import mcp_servers
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply

pytestmark = pytest.mark.e2e

WORKER_SECRET = "worker-secret-key-must-stay-in-the-worker"
MODEL_KEY = "sk-model-key-must-stay-in-the-worker"


def calls_in_turn(*calls: tuple[str, dict[str, Any]]) -> Any:
    """The model: these calls one per turn, then an answer (decided by the conversation,
    so a request repeated after a crash gets the same call under a new id)."""

    def respond(req: Recorded) -> Reply:
        done = len([m for m in req.json["messages"] if m["role"] == "tool"])
        if done < len(calls):
            name, arguments = calls[done]
            call = oa_call(f"c-{uuid.uuid4().hex[:8]}", name, arguments)
            return Reply(json=oa_reply(tool_calls=[call]))
        return Reply(json=oa_reply(content="Done."))

    return respond


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def env(stack_env: dict[str, str], llm: FakeLLMServer) -> dict[str, str]:
    return {
        **stack_env,
        "SECRET_KEY": WORKER_SECRET,
        "AGENTWEB_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": MODEL_KEY,
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_LEASE_SECONDS": "2",
        "AGENTWEB_MCP_TIMEOUT_SECONDS": "2",
        "AGENTWEB_QUEUE": f"e2e-mcp-{os.getpid()}",
    }


@pytest.fixture(scope="module")
def stack(
    env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("mcp")
    web, url = start_web(env, tmp)
    beat = start_beat(env, tmp)
    yield {"url": url, "env": env, "tmp": tmp}
    beat.stop()
    web.stop()


def api(stack: dict[str, Any], username: str) -> httpx.Client:
    from django.contrib.auth import get_user_model

    from agentweb.accounts.models import ApiToken

    user = get_user_model().objects.get(username=username)
    headers = {"Authorization": f"Bearer {ApiToken.issue(user)}"}
    return httpx.Client(base_url=stack["url"], headers=headers, timeout=20)


def add_server(stack: dict[str, Any], name: str, ledger: Path | None = None) -> float:
    """Add our faulty server through the API; seconds until its tools are listed."""
    env = {"FAULTY_LEDGER": str(ledger)} if ledger else {}
    with api(stack, "admin") as admin:
        started = time.monotonic()
        body = {"name": name, "command": mcp_servers.faulty_command(), "env": env}
        added = admin.post("/api/mcp-servers", json=body)
        assert added.status_code == 201, added.text

        def listed() -> bool:
            found = admin.get(f"/api/mcp-servers/{name}").json()
            return found["state"] == "ready" and f"{name}__transfer" in found["tools"]

        wait_for(listed, 60, 0.2)
        return time.monotonic() - started


def add_profile(stack: dict[str, Any], name: str, allowed: list[str]) -> None:
    body = {"name": name, "system_prompt": "Do as asked.", "allowed_tools": allowed}
    with api(stack, "admin") as admin:
        # The web process offers a new server's tools within its poll (2 s).
        wait_for(lambda: admin.post("/api/agents", json=body).status_code == 201, 20, 0.3)


def start_run(stack: dict[str, Any], agent: str, task: str) -> int:
    with api(stack, "operator") as operator:
        created = operator.post("/api/runs", json={"task": task, "agent": agent})
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


def approve_pending(stack: dict[str, Any], run_id: int) -> int:
    decided = 0
    with api(stack, "approver") as approver:
        for approval in Approval.objects.filter(run_id=run_id, status="pending"):
            answer = approver.post(
                f"/api/approvals/{approval.pk}/decide", json={"decision": "approve"}
            )
            assert answer.status_code == 200, answer.text
            decided += 1
    return decided


def ledger_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def children(proc: Proc) -> list[int]:
    pid = proc.proc.pid
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            found += [int(p) for p in fh.read().split()]
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def finished_events(run_id: int) -> list[dict[str, Any]]:
    rows = RunEvent.objects.filter(run_id=run_id, type="tool_call_finished").order_by("seq")
    return [e.data for e in rows]


def test_a_server_added_while_running_pauses_a_high_risk_call_which_runs_once_across_a_kill_9(
    demo, stack, llm, tmp_path
) -> None:
    ledger = tmp_path / "ledger"
    first = start_worker(stack["env"], stack["tmp"], "first")
    second: Proc | None = None
    try:
        seconds = add_server(stack, "pay", ledger)
        assert seconds < 30, f"listed after {seconds:.1f} s"
        add_profile(stack, "payer", ["pay__*"])
        llm.responder = calls_in_turn(("pay__transfer", {"account": "ACME", "amount": 250.0}))
        run_id = start_run(stack, "payer", "Pay ACME 250")
        wait_for(lambda: Run.objects.filter(pk=run_id, status="waiting_approval").exists(), 60, 0.2)
        [approval] = Approval.objects.filter(run_id=run_id)
        assert (approval.tool, approval.risk, approval.status) == (
            "pay__transfer",
            "high",
            "pending",
        )
        assert ledger_of(ledger) == []  # nothing happens before a person decides
        servers = [pid for pid in children(first) if alive(pid)]
        assert servers, "the worker has the server's process"
        first.kill9()
        # The server's own process sees its stdin close and goes (no orphan stays).
        wait_for(lambda: not any(alive(pid) for pid in servers), 20, 0.1)
        checked = McpServer.objects.get(name="pay").checked_at
        second = start_worker(stack["env"], stack["tmp"], "second")
        # A worker that starts reads every server's tool list again.
        wait_for(lambda: McpServer.objects.get(name="pay").checked_at > checked, 30, 0.2)
        assert approve_pending(stack, run_id) == 1
        run = wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), 90)
        assert run.status == "succeeded", run.failure_reason
        [entry] = ledger_of(ledger)  # once
        assert entry["replayed"] is False
        key = f"{run_id}:{approval.call_id}"
        assert entry["idempotency_key"] == key == entry["request_id"]
        assert entry["run_id"] == str(run_id)
        [finished] = finished_events(run_id)
        assert finished["ok"] and finished["result"] == {"result": "moved 250.00 to ACME"}
        assert [e.status for e in ToolExecution.objects.filter(run_id=run_id)] == ["succeeded"]
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_worker_dead_after_the_call_leaves_it_to_a_person_and_the_key_is_the_same(
    demo, stack, llm, tmp_path
) -> None:
    ledger = tmp_path / "ledger"
    env = {**stack["env"], "AGENTWEB_TEST_CRASH_AT": "tool_returned:pay2__transfer"}
    doomed = start_worker(env, stack["tmp"], "doomed")
    healthy: Proc | None = None
    try:
        add_server(stack, "pay2", ledger)
        add_profile(stack, "payer2", ["pay2__transfer"])
        llm.responder = calls_in_turn(("pay2__transfer", {"account": "ZED", "amount": 80.0}))
        run_id = start_run(stack, "payer2", "Pay ZED 80")

        def died() -> bool:
            approve_pending(stack, run_id)  # the call is high risk: a person first
            return doomed.proc.poll() is not None

        wait_for(died, 90, 0.2)
        assert doomed.proc.returncode == faults.EXIT_CODE, doomed.output()[-2000:]
        assert len(ledger_of(ledger)) == 1  # it happened; the worker died before recording
        healthy = start_worker(stack["env"], stack["tmp"], "healthy")

        def unknown_outcome_asked() -> bool:
            return Approval.objects.filter(
                run_id=run_id, status="pending", reason="unknown_outcome"
            ).exists()

        wait_for(unknown_outcome_asked, 90, 0.2)  # not retried blindly: a person again
        approve_pending(stack, run_id)
        run = wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), 90)
        assert run.status == "succeeded", run.failure_reason
        entries = ledger_of(ledger)
        assert [e["replayed"] for e in entries] == [False, True]  # the server paid once
        assert len({e["idempotency_key"] for e in entries}) == 1
    finally:
        doomed.stop()
        if healthy is not None:
            healthy.stop()


def test_faults_leave_the_worker_alive_isolated_and_its_tool_list_fresh(demo, stack, llm) -> None:
    worker = start_worker(stack["env"], stack["tmp"], "steady")
    try:
        add_server(stack, "faulty")
        add_profile(stack, "prober", ["faulty__*"])
        llm.responder = calls_in_turn(
            ("faulty__crash", {}),
            ("faulty__garbage", {}),
            ("faulty__hang", {}),
            ("faulty__environment", {}),
            ("faulty__grow", {}),
            ("faulty__echo", {"text": "still here"}),
        )
        run_id = start_run(stack, "prober", "Probe the server")
        run = wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), 120)
        assert run.status == "succeeded", run.failure_reason
        assert worker.proc.poll() is None  # no worker died
        crash, garbage, hang, environment, grow, echo = finished_events(run_id)
        assert not crash["ok"] and crash["error"].startswith(
            "MCP server 'faulty' closed the connection during the call"
        )
        assert not garbage["ok"] and garbage["error"].startswith(
            "MCP server 'faulty' answered something that is not JSON-RPC"
        )
        assert hang["error"] == (
            "MCP server 'faulty' did not answer within 2 s; it is started again for the next call"
        )
        seen = json.loads(environment["result"]["result"])
        assert set(seen) - {"LC_CTYPE"} <= {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
        assert WORKER_SECRET not in json.dumps(seen) and MODEL_KEY not in json.dumps(seen)
        assert grow["ok"] and echo["ok"] and echo["result"] == {"result": "still here"}
        live = [pid for pid in children(worker) if alive(pid)]
        assert len(live) == 1 and len(children(worker)) == 1  # one server, no zombie
        assert "MCP server faulty (stderr): faulty: starting" in worker.output()
        with api(stack, "admin") as admin:

            def grown() -> bool:
                return "faulty__grown" in admin.get("/api/mcp-servers/faulty").json()["tools"]

            wait_for(grown, 20, 0.2)  # re-read on the server's list_changed
    finally:
        worker.stop()
