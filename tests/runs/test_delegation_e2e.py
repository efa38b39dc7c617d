"""Delegation with real processes: API → Celery worker(s) → fake model over HTTP.

A coordinator hands two tasks to specialists, waits for them and answers. The model
decides every reply from the conversation (the system prompt says which agent asks), so
parallel children and a resumed parent always get the right reply.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentweb.runs.models import AgentProfile, Approval, Run, RunEvent
from tests.conftest import Proc, start_beat, start_web, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply

pytestmark = pytest.mark.e2e

CHILD_DELAY = 0.6  # seconds each specialist's model call takes


def _system(req: Recorded) -> str:
    return str(req.json["messages"][0]["content"])


def _tool_messages(req: Recorded) -> list[dict[str, Any]]:
    return [m for m in req.json["messages"] if m["role"] == "tool"]


def responder(req: Recorded) -> Reply:
    system, done = _system(req), _tool_messages(req)
    if "coordinator" not in system:  # a specialist: one slow call, then its finding
        task = next(m for m in req.json["messages"] if m["role"] == "user")["content"]
        if "approval" in task and not done:  # a risky call: the child waits for a person
            args = {"order_id": "A1", "amount": 30}
            return Reply(json=oa_reply(tool_calls=[oa_call("p-1", "pay_out", args)]))
        if "fail" in task:
            return Reply(status=400, json={"error": {"message": "bad request from a test"}})
        return Reply(delay=CHILD_DELAY, json=oa_reply(content=f"finding for: {task}"))
    if not done:
        return Reply(
            json=oa_reply(
                tool_calls=[
                    oa_call("d-1", "delegate_task", {"agent": "shipping", "task": "track 1Z1"}),
                    oa_call("d-2", "delegate_task", {"agent": "billing", "task": _billing(req)}),
                ]
            )
        )
    if len(done) == 2:
        ids = [json.loads(m["content"])["task_id"] for m in done]
        return Reply(
            json=oa_reply(tool_calls=[oa_call("w-1", "wait_for_tasks", {"task_ids": ids})])
        )
    return Reply(json=oa_reply(content="Combined: " + done[-1]["content"][:500]))


def _billing(req: Recorded) -> str:
    task = next(m for m in req.json["messages"] if m["role"] == "user")["content"]
    if "fail" in task:
        return "fail the billing check"
    if "approval" in task:
        return "pay back 30 on A1 (needs approval)"
    return "check the double charge"


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        server.responder = responder
        yield server


@pytest.fixture(scope="module")
def env(stack_env: dict[str, str], llm: FakeLLMServer) -> dict[str, str]:
    return {
        **stack_env,
        "AGENTWEB_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_QUEUE": f"e2e-delegation-{os.getpid()}",
        "AGENTWEB_LEASE_SECONDS": "2",
    }


@pytest.fixture(scope="module")
def web(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_web(env, tmp_path_factory.mktemp("web"))
    yield url
    proc.stop()


@pytest.fixture
def team(people: dict[str, Any]) -> dict[str, Any]:
    for name, role in (("shipping", "shipping"), ("billing", "billing"), ("lead", "coordinator")):
        AgentProfile.objects.create(
            name=name,
            system_prompt=f"You are the {role} agent.",
            delegates=["shipping", "billing"] if name == "lead" else [],
            allowed_tools=["lookup", "pay_out"],
        )
    return people


def _client(web: str, username: str) -> httpx.Client:
    from django.contrib.auth import get_user_model

    from agentweb.accounts.models import ApiToken

    user = get_user_model().objects.get(username=username)
    headers = {"Authorization": f"Bearer {ApiToken.issue(user)}"}
    return httpx.Client(base_url=web, headers=headers, timeout=10)


def _worker(env: dict[str, str], tmp: Any, threads: int, name: str = "w") -> Proc:
    return start_worker({**env, "AGENTWEB_TOOLS": "tests.runs.sample_tools"}, tmp, name, threads)


def _start(web: str, task: str) -> int:
    created = _client(web, "operator").post("/api/runs", json={"task": task, "agent": "lead"})
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


def _finished(run_id: int, timeout: float = 60) -> Run:
    return wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), timeout)


@pytest.mark.parametrize("threads", [4, 1])
def test_children_run_in_parallel_and_one_thread_still_finishes(
    team, env, web, threads, tmp_path
) -> None:
    worker = _worker(env, tmp_path, threads)
    try:
        run_id = _start(web, "Late parcel and a double charge")
        run = _finished(run_id)
        assert run.status == "succeeded", (run.failure_reason, worker.output()[-3000:])
        children = list(Run.objects.filter(parent_id=run_id).order_by("pk"))
        assert len(children) == 2
        assert {c.status for c in children} == {"succeeded"}
        assert "finding for: track 1Z1" in run.final_answer
        body = _client(web, "operator").get(f"/api/runs/{run_id}").json()
        assert body["children"] == [c.pk for c in children] and body["parent_id"] is None
        assert (
            _client(web, "operator").get(f"/api/runs/{children[0].pk}").json()["parent_id"]
            == run_id
        )
        types = list(
            RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True)
        )
        assert types.count("subtask_started") == 2 and types.count("subtask_finished") == 2
        assert run.usage["model_calls"] == 3 + 2  # the children's calls rolled up
        a, b = children
        assert a.started_at and b.started_at and a.finished_at and b.finished_at
        overlap = min(a.finished_at, b.finished_at) - max(a.started_at, b.started_at)
        if threads > 1:  # the children's running intervals overlap
            assert overlap.total_seconds() > CHILD_DELAY / 2, overlap
        else:  # one thread: one after the other, the parent held no thread meanwhile
            assert overlap.total_seconds() <= 0, overlap
    finally:
        worker.stop()


def test_a_failed_child_reaches_the_parent_and_cancel_takes_the_subtree(
    team, env, web, tmp_path
) -> None:
    worker = _worker(env, tmp_path, 4)
    try:
        run_id = _start(web, "Late parcel; fail the billing part")
        run = _finished(run_id)
        assert run.status == "succeeded", run.failure_reason
        finished = {
            e.data["task_id"]: e.data
            for e in RunEvent.objects.filter(run_id=run_id, type="subtask_finished")
        }
        billing = Run.objects.get(parent_id=run_id, agent__name="billing")
        assert billing.status == "failed"
        assert finished[billing.pk]["status"] == "failed"
        assert "400" in finished[billing.pk]["error"]
        assert '"status": "failed"' in run.final_answer  # the parent's model read it

        # Cancel a parent while it waits for a child that waits for a person (its other
        # child has finished by then).
        run_id = _start(web, "Late parcel; a refund that needs approval")
        wait_for(
            lambda: (
                Run.objects.filter(parent_id=run_id, status="waiting_approval").exists()
                and Run.objects.filter(parent_id=run_id, status="succeeded").exists()
            ),
            30,
        )
        assert Run.objects.get(pk=run_id).status == "waiting_subtasks"
        cancelled = _client(web, "admin").post(f"/api/runs/{run_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        # Cancelled at once, in the request: nothing in the tree was running.
        assert Run.objects.get(pk=run_id).status == "cancelled"
        assert Run.objects.get(parent_id=run_id, agent__name="billing").status == "cancelled"
        assert Run.objects.get(parent_id=run_id, agent__name="shipping").status == "succeeded"
        assert not RunEvent.objects.filter(run_id=run_id, type="run_finished").exists()
        assert not Approval.objects.filter(run__parent_id=run_id, status="pending").exists()
    finally:
        worker.stop()


@pytest.mark.parametrize(
    "point",
    ["tool_begun:delegate_task", "tool_returned:delegate_task", "step_committing:delegate_task"],
)
def test_a_worker_killed_mid_delegation_makes_each_child_once(
    team, env, web, tmp_path, point
) -> None:
    """The worker dies (like kill -9) after a child was created but before the step that
    announced it committed; the worker that takes over gets the same children."""
    from agentweb.runs.models import ToolExecution

    doomed = _worker({**env, "AGENTWEB_TEST_CRASH_AT": point}, tmp_path, 4, "doomed")
    run_id = _start(web, "Late parcel and a double charge")
    wait_for(lambda: doomed.proc.poll() is not None, 30)
    assert doomed.proc.returncode == 86, doomed.output()[-2000:]
    doomed.stop()
    healthy = _worker(env, tmp_path, 4, "healthy")
    beat = start_beat(env, tmp_path)
    try:
        run = _finished(run_id)
        assert run.status == "succeeded", (run.failure_reason, healthy.output()[-3000:])
        children = Run.objects.filter(parent_id=run_id)
        assert children.count() == 2
        assert sorted(children.values_list("parent_call_id", flat=True)) == ["d-1", "d-2"]
        assert {c.status for c in children} == {"succeeded"}
        assert ToolExecution.objects.filter(run_id=run_id, tool="delegate_task").count() == 2
        started = RunEvent.objects.filter(run_id=run_id, type="subtask_started")
        assert sorted(e.data["task_id"] for e in started) == sorted(c.pk for c in children)
        assert RunEvent.objects.filter(run_id=run_id, type="subtask_finished").count() == 2
    finally:
        beat.stop()
        healthy.stop()
