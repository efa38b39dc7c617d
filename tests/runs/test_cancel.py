"""Cancel means now: during a trickling stream or a blocking model call the run is
``cancelled`` within 5 s, the provider's connection is closed, and no tool of that step
runs; its pending approvals become ``cancelled``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentweb.runs import actions, agents, engine, leases
from agentweb.runs.models import Run, RunEvent, ToolExecution
from agentweb.runtime.openai import OpenAIChatModel
from agentweb.runtime.providers import Provider
from agentweb.runtime.testing import call
from tests.conftest import wait_for
from tests.fakes.llm_server import FakeLLMServer, Reply, oa_call, oa_reply, oa_text_chunks
from tests.runs import sample_tools


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch, sample_registry: None) -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        model = OpenAIChatModel(
            "fake", Provider(name="openai", base_url=server.openai_url, max_retries=0)
        )
        monkeypatch.setattr(agents, "model_for", lambda spec: model)
        yield server


def run_in_thread(run_id: int) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def work() -> None:
        from django.db import connection

        try:
            out["status"] = engine.execute_run(run_id)
        finally:
            connection.close()

    out["thread"] = threading.Thread(target=work, daemon=True)
    out["thread"].start()
    return out


def cancel_and_time(people: dict[str, Any], run: Run, llm: FakeLLMServer) -> float:
    wait_for(lambda: llm.requests, 20)
    time.sleep(1.0)  # well inside the reply
    began = time.monotonic()
    actions.do_request_cancel(Run.objects.get(pk=run.pk), people["operator"])
    wait_for(lambda: Run.objects.get(pk=run.pk).status in Run.FINAL, 10, 0.02)
    return time.monotonic() - began


@pytest.mark.parametrize("stream", [True, False])
def test_cancel_lands_within_5_s_during_a_slow_model_call(
    people, llm, enqueued, settings, stream
) -> None:
    settings.AGENTWEB_STREAM = stream
    if stream:  # one token every 2 s, then a tool call it must never run
        llm.enqueue(Reply(sse=oa_text_chunks("slowly " * 20, size=1), interval=2.0))
    else:  # a blocking call whose answer would come after a minute
        llm.enqueue(Reply(delay=60, json=oa_reply(tool_calls=[oa_call("c1", "pay_out", {"x": 1})])))
    run = actions.do_create_run(user=people["operator"], task="Slow")
    worker = run_in_thread(run.pk)
    took = cancel_and_time(people, run, llm)
    worker["thread"].join(10)
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED, run.failure_reason
    assert took < 5.0, took
    assert worker["status"] == Run.Status.CANCELLED
    wait_for(lambda: llm.disconnects == 1, 5)  # the connection to the model was closed
    types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    assert types.count("run_cancelled") == 1 and "run_failed" not in types
    assert not ToolExecution.objects.filter(run=run).exists()


def test_a_reply_that_comes_with_the_cancel_runs_no_tool(people, scripted, enqueued) -> None:
    run = actions.do_create_run(user=people["operator"], task="Note it")

    def reply(messages: Any, tools: Any) -> Any:
        actions.do_request_cancel(Run.objects.get(pk=run.pk), people["operator"])
        time.sleep(leases.CANCEL_POLL_SECONDS * 3)  # the worker has noticed by now
        return call("note", customer_id="C1", text="never")

    scripted.enqueue(reply)
    assert engine.execute_run(run.pk) == Run.Status.CANCELLED
    types = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
    assert types == ["run_started", "model_called", "run_cancelled"]
    assert sample_tools.SIDE_EFFECTS["note:C1"] == 0
    assert not ToolExecution.objects.filter(run=run).exists()


def test_a_model_call_has_an_overall_deadline(people, llm, enqueued, settings) -> None:
    settings.AGENTWEB_STREAM = True
    settings.AGENTWEB_MODEL_DEADLINE_SECONDS = 2
    llm.enqueue(Reply(sse=oa_text_chunks("tick " * 20, size=1), interval=0.5))
    run = actions.do_create_run(user=people["operator"], task="Slow")
    began = time.monotonic()
    assert engine.execute_run(run.pk) == Run.Status.FAILED
    assert time.monotonic() - began < 5
    run.refresh_from_db()
    assert "deadline of 2 s" in run.failure_reason
