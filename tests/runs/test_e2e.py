"""End to end with real processes: API → Redis → Celery worker → model over HTTP → events.

The worker talks to a fake OpenAI-compatible server started by the test (real HTTP), and
the bundled ticket tools act on the seeded demo shop.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from agentweb.runs.models import Approval, Run, RunEvent, ToolExecution
from tests.conftest import Proc, start_beat, start_web, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply

pytestmark = pytest.mark.e2e


def tool_results(req: Recorded) -> list[dict[str, Any]]:
    return [m for m in req.json["messages"] if m["role"] == "tool"]


def refund_script(amount: float, stall_on_answer: list[float]) -> Any:
    """The model: look up the order, refund, answer. Decided by the conversation so far,
    so a retried request after a crash gets the same reply. The first final-answer
    requests wait the seconds in ``stall_on_answer`` (popped as they are used)."""

    def respond(req: Recorded) -> Reply:
        if not isinstance(req.json, dict):  # a body cut off (a client killed mid-send)
            return Reply(status=400, json={"error": {"message": "fake: no JSON body"}})
        user = next(m for m in req.json["messages"] if m["role"] == "user")["content"]
        order = user.split()[-1]
        done = tool_results(req)
        if not done:
            return Reply(
                json=oa_reply(tool_calls=[oa_call("c-1", "get_order", {"order_id": order})])
            )
        if len(done) == 1:
            return Reply(
                json=oa_reply(
                    tool_calls=[
                        oa_call(
                            "c-2",
                            "issue_refund",
                            {"order_id": order, "amount": amount, "reason": "damaged item"},
                        )
                    ]
                )
            )
        delay = stall_on_answer.pop(0) if stall_on_answer else 0.0
        result = done[-1]["content"]
        return Reply(delay=delay, json=oa_reply(content=f"Refund done: {result[:60]}"))

    return respond


def model_log(llm: FakeLLMServer, task: str) -> str:
    """The fake model's requests for one task, for a failure's message."""
    lines = []
    for r in llm.requests:
        body = r.json if isinstance(r.json, dict) else None
        if body is not None and task not in json.dumps(body):
            continue
        tools = len(tool_results(r)) if body is not None else "no JSON body"
        lines.append(f"  client port {r.peer}: {tools} tool results")
    return "\n".join(lines) or "  (none)"


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def env(stack_env: dict[str, str], llm: FakeLLMServer) -> dict[str, str]:
    return {
        **stack_env,
        "AGENTWEB_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_LEASE_SECONDS": "3",
        # A queue of its own: the session's demo-model worker must not take these runs.
        "AGENTWEB_QUEUE": f"e2e-{os.getpid()}",
    }


@pytest.fixture(scope="module")
def stack(
    env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("stack")
    web, url = start_web(env, tmp)
    worker = start_worker(env, tmp, "worker-a")
    procs: dict[str, Any] = {"web": web, "url": url, "worker": worker, "tmp": tmp, "env": env}
    yield procs
    for key in ("worker", "web", "beat"):
        proc = procs.get(key)
        if isinstance(proc, Proc):
            proc.stop()


def token(username: str) -> dict[str, str]:
    from django.contrib.auth import get_user_model

    from agentweb.accounts.models import ApiToken

    user = get_user_model().objects.get(username=username)
    return {"Authorization": f"Bearer {ApiToken.issue(user)}"}


def refundable_order() -> Any:
    from agentweb.shop.models import Order

    for order in Order.objects.filter(captured_amount__gt=50).order_by("number"):
        if order.refunded_amount() == 0:
            return order
    raise AssertionError("the seeded shop has no refundable order")


def test_a_run_flows_through_the_worker_and_events_arrive_in_order(demo, stack, llm) -> None:
    llm.responder = refund_script(12.5, [])
    order = refundable_order()
    client = httpx.Client(base_url=stack["url"], headers=token("operator"), timeout=10)
    created = client.post("/api/runs", json={"task": f"Refund the damaged item on {order.number}"})
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    run = wait_for(
        lambda: (
            client.get(f"/api/runs/{run_id}").json()
            if client.get(f"/api/runs/{run_id}").json()["status"] in Run.FINAL
            else None
        )
    )
    assert run["status"] == "succeeded", run
    assert run["final_answer"].startswith("Refund done")
    events = client.get(f"/api/runs/{run_id}/events", params={"after": 0}).json()["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events] == [
        "run_started",
        "model_called",
        "tool_call_started",
        "tool_call_finished",
        "model_called",
        "tool_call_started",
        "tool_call_finished",
        "model_called",
        "run_finished",
    ]
    assert order.refunds.count() == 1
    assert ToolExecution.objects.filter(run_id=run_id, status="succeeded").count() == 2


def test_kill_9_mid_run_resumes_and_never_repeats_the_refund(demo, stack, llm) -> None:
    """The worker dies while the model call after the refund is in flight; another worker
    takes the run over when the lease expires and finishes it; the ledger has one refund."""
    from agentweb.shop.models import Refund

    stall = [60.0]  # the first final-answer call stalls: worker-a dies waiting on it
    llm.responder = refund_script(15.0, stall)
    order = refundable_order()
    task = f"Refund the item on {order.number}"
    client = httpx.Client(base_url=stack["url"], headers=token("operator"), timeout=10)
    run_id = client.post("/api/runs", json={"task": task}).json()["id"]
    wait_for(lambda: RunEvent.objects.filter(run_id=run_id, seq__gte=7).exists(), 30)
    # The stall was handed out: worker-a's final-answer call is the one waiting on it.
    # (Not "a request with two tool results that names the order was recorded": the
    # database is emptied and seeded again between tests, so this test refunds the same
    # order as the first one, whose final request matched that at once. The kill then
    # raced worker-a's final call, and when it won, worker-b's call got the stall.)
    wait_for(lambda: not stall, 30)
    stack["worker"].kill9()
    run = Run.objects.get(pk=run_id)
    assert run.status == "running", (run.status, model_log(llm, task))
    assert Refund.objects.filter(order=order).count() == 1
    stack["worker"] = start_worker(stack["env"], stack["tmp"], "worker-b")
    stack["beat"] = start_beat(stack["env"], stack["tmp"])
    try:
        run = wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), 45)
    except AssertionError:
        # Celery logs every thread's stack on SIGUSR1: where worker-b is stuck.
        os.kill(stack["worker"].proc.pid, signal.SIGUSR1)
        time.sleep(1)
        periodic = ("poll_mailbox", "sweep_deliveries", "requeue_stale", "escalate", "expire_")
        lines = [
            x for x in stack["worker"].output().splitlines() if not any(p in x for p in periodic)
        ]
        tail = "\n".join(lines[-400:])
        raise AssertionError(
            f"run {run_id} did not finish after the takeover\n"
            f"model requests:\n{model_log(llm, task)}\nworker-b:\n{tail}"
        ) from None
    assert run.status == "succeeded", run.failure_reason
    assert run.attempts == 2
    assert Refund.objects.filter(order=order).count() == 1
    seqs = list(RunEvent.objects.filter(run_id=run_id).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert [t for t in RunEvent.objects.filter(run_id=run_id).values_list("type", flat=True)].count(
        "tool_call_finished"
    ) == 2


def test_fifty_simultaneous_approvals_resume_once(demo, stack, llm) -> None:
    from agentweb.shop.models import Refund

    llm.responder = refund_script(35.0, [])  # 35 needs approval
    order = refundable_order()
    client = httpx.Client(base_url=stack["url"], headers=token("operator"), timeout=10)
    run_id = client.post("/api/runs", json={"task": f"Refund on {order.number}"}).json()["id"]
    wait_for(lambda: Run.objects.filter(pk=run_id, status="waiting_approval").exists(), 30)
    approval = Approval.objects.get(run_id=run_id)
    headers = token("approver")

    def click(_: int) -> int:
        with httpx.Client(base_url=stack["url"], headers=headers, timeout=30) as c:
            return c.post(
                f"/api/approvals/{approval.pk}/decide", json={"decision": "approve"}
            ).status_code

    with ThreadPoolExecutor(max_workers=50) as pool:
        codes = list(pool.map(click, range(50)))
    assert sorted(codes) == [200] + [409] * 49
    run = wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), 30)
    assert run.status == "succeeded"
    assert Refund.objects.filter(order=order).count() == 1
    assert RunEvent.objects.filter(run_id=run_id, type="approval_decided").count() == 1
    assert RunEvent.objects.filter(run_id=run_id, type="run_finished").count() == 1
