"""Side effects exactly once with real worker processes: a worker started with
``AGENTWEB_TEST_CRASH_AT`` exits (``os._exit``, like kill -9) at each point between the
model's reply and the stored step; a healthy worker takes the run over when the lease
expires. The demo shop's ledger shows one note / one refund per intended write, and one
ToolExecution row per call.

A call that may or may not have happened (a crash between its record and its result)
goes to a person, who approves it here after "checking"; it runs under the same
idempotency key, so the shop records it once.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from agentweb.runs import faults
from agentweb.runs.models import Approval, Run, ToolExecution
from tests.conftest import Proc, start_beat, start_web, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply

pytestmark = pytest.mark.e2e


def one_write(tool: str, arguments: dict[str, Any]) -> Any:
    """The model: one write, then an answer. Decided by the conversation, so a request
    repeated after a crash gets the same call (under a new id)."""

    def respond(req: Recorded) -> Reply:
        if not [m for m in req.json["messages"] if m["role"] == "tool"]:
            call_id = f"c-{uuid.uuid4().hex[:8]}"
            return Reply(json=oa_reply(tool_calls=[oa_call(call_id, tool, arguments)]))
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
        "AGENTWEB_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_LEASE_SECONDS": "2",
        "AGENTWEB_QUEUE": f"e2e-crash-{os.getpid()}",
    }


@pytest.fixture(scope="module")
def stack(
    env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("crash")
    web, url = start_web(env, tmp)
    beat = start_beat(env, tmp)
    yield {"url": url, "env": env, "tmp": tmp}
    beat.stop()
    web.stop()


def token(username: str) -> dict[str, str]:
    from django.contrib.auth import get_user_model

    from agentweb.accounts.models import ApiToken

    user = get_user_model().objects.get(username=username)
    return {"Authorization": f"Bearer {ApiToken.issue(user)}"}


def approve_pending(url: str, run_id: int) -> int:
    decided = 0
    with httpx.Client(base_url=url, headers=token("approver"), timeout=10) as client:
        for approval in Approval.objects.filter(run_id=run_id, status="pending"):
            response = client.post(
                f"/api/approvals/{approval.pk}/decide", json={"decision": "approve"}
            )
            assert response.status_code == 200, response.text
            decided += 1
    return decided


def crash_and_recover(
    stack: dict[str, Any],
    crash_at: str,
    task: str,
    *,
    within: float = 90,
    while_dead: Callable[[Run], None] | None = None,
) -> Run:
    """A worker started with ``AGENTWEB_TEST_CRASH_AT=crash_at`` takes the run and dies;
    ``while_dead`` looks at the run then; a healthy worker must finish it ``within``."""
    crashing: Proc = start_worker(
        {**stack["env"], "AGENTWEB_TEST_CRASH_AT": crash_at}, stack["tmp"], "doomed"
    )
    healthy: Proc | None = None
    try:
        with httpx.Client(base_url=stack["url"], headers=token("operator"), timeout=10) as c:
            created = c.post("/api/runs", json={"task": task})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]

        def died_or_waits() -> bool:
            approve_pending(stack["url"], run_id)  # the write's own approval, if it has one
            return crashing.proc.poll() is not None

        wait_for(died_or_waits, 60, 0.2)
        assert crashing.proc.returncode == faults.EXIT_CODE, crashing.output()[-2000:]
        assert Run.objects.get(pk=run_id).status in Run.ACTIVE
        if while_dead is not None:
            while_dead(Run.objects.get(pk=run_id))
        healthy = start_worker(stack["env"], stack["tmp"], "healthy")

        def finished() -> Run | None:
            approve_pending(stack["url"], run_id)  # e.g. a call whose outcome is unknown
            return Run.objects.filter(pk=run_id, status__in=Run.FINAL).first()

        run = wait_for(finished, within, 0.2)
        assert run.status == "succeeded", run.failure_reason
        return run
    finally:
        crashing.stop()
        if healthy is not None:
            healthy.stop()


def a_customer() -> Any:
    from agentweb.shop.models import Customer

    return Customer.objects.order_by("code").first()


def a_refundable_order() -> Any:
    from agentweb.shop.models import Order

    for order in Order.objects.filter(captured_amount__gt=50).order_by("number"):
        if order.refunded_amount() == 0:
            return order
    raise AssertionError("the seeded shop has no refundable order left")


@pytest.mark.parametrize("point", faults.POINTS)
def test_a_no_approval_note_is_written_once_whenever_the_worker_dies(
    demo, stack, llm, point
) -> None:
    from agentweb.shop.models import CustomerNote

    customer = a_customer()
    text = f"Crash test at {point} ({uuid.uuid4().hex[:6]})"
    llm.responder = one_write("add_customer_note", {"customer_id": customer.code, "note": text})
    run = crash_and_recover(stack, f"{point}:add_customer_note", f"Note for {customer.code}")
    assert CustomerNote.objects.filter(customer=customer, body=text).count() == 1
    rows = ToolExecution.objects.filter(run=run, tool="add_customer_note")
    assert [r.status for r in rows] == ["succeeded"]


@pytest.mark.parametrize("point", faults.POINTS)
def test_an_approved_refund_is_issued_once_whenever_the_worker_dies(
    demo, stack, llm, point
) -> None:
    order = a_refundable_order()
    llm.responder = one_write(
        "issue_refund", {"order_id": order.number, "amount": 35.0, "reason": "broken on arrival"}
    )
    run = crash_and_recover(stack, f"{point}:issue_refund", f"Refund {order.number}")
    assert order.refunds.count() == 1
    assert [r.status for r in ToolExecution.objects.filter(run=run, tool="issue_refund")] == [
        "succeeded"
    ]
    assert Approval.objects.filter(run=run, status="approved").exists()  # a person approved


def test_a_run_whose_message_died_with_its_worker_is_done_once(demo, stack, llm) -> None:
    """The worker dies with the run's message taken off the queue and the run not claimed
    yet. The broker keeps no copy (no acknowledgement emulation: settings), so only beat's
    sweep can bring the run back: the queue is empty while the run waits, so it is sent
    again, and a healthy worker does it, once."""
    from agentweb.shop.models import CustomerNote

    customer = a_customer()
    text = f"Lost message ({uuid.uuid4().hex[:6]})"
    llm.responder = one_write("add_customer_note", {"customer_id": customer.code, "note": text})

    def queued_untouched(run: Run) -> None:
        assert (run.status, run.attempts, run.last_seq) == ("queued", 0, 0)

    # Within 45 s: the sweep's rule for an empty queue (a queued run older than 10 s), not
    # the queue grace of 60 s, nor the broker's visibility timeout, brings it back.
    run = crash_and_recover(
        stack,
        "message_received",
        f"Note for {customer.code}",
        within=45,
        while_dead=queued_untouched,
    )
    assert run.attempts == 1
    assert CustomerNote.objects.filter(customer=customer, body=text).count() == 1
    assert [r.status for r in ToolExecution.objects.filter(run=run)] == ["succeeded"]
