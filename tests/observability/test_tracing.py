"""Spans of a scripted run with an approval, across a pause, a decision and a resume."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from agentweb.observability import tracing
from agentweb.runs import actions, engine
from agentweb.runs.models import Approval, Run, RunEvent
from agentweb.runtime.testing import call
from tests.conftest import ROOT


def new_process(exporter: Any) -> None:
    """What a fresh worker or web process has: a new provider, no memory of the run."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    tracing.use_processor(SimpleSpanProcessor(exporter))


def by_name(spans: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def run_with_approval(people: dict[str, Any], scripted: Any, spans: Any) -> Run:
    scripted.enqueue(
        call("lookup", order_id="A1"),
        call("pay_out", order_id="A1", amount=30),
        "Paid back 30.",
    )
    run = actions.do_create_run(user=people["operator"], task="Order A1 never arrived")
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    new_process(spans)  # the web process decides
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(
        approval_id=approval.pk, user=people["approver"], decision="approve", comment="ok"
    )
    new_process(spans)  # another worker resumes
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    return run


def test_it_makes_one_trace_of_a_paused_and_resumed_run(people, scripted, enqueued, spans) -> None:
    run = run_with_approval(people, scripted, spans)
    finished = spans.get_finished_spans()
    names = by_name(finished)
    assert sorted(names) == [
        "await_approval pay_out",
        "chat demo",
        "execute_tool lookup",
        "execute_tool pay_out",
        "invoke_agent ticket-assistant",
    ]
    assert len(names["chat demo"]) == 3
    assert {span.context.trace_id for span in finished} == {int(run.trace_id, 16)}
    assert len(run.trace_id) == 32 and run.trace_id == run.trace_id.lower()

    (root,) = names["invoke_agent ticket-assistant"]
    assert root.context.span_id == int(run.trace_span_id, 16)
    assert root.parent is None
    for span in finished:
        if span is not root:
            assert span.parent.span_id == root.context.span_id, span.name
            assert root.start_time <= span.start_time <= span.end_time <= root.end_time
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "ticket-assistant"
    assert root.attributes["agentweb.run.id"] == run.pk
    assert root.attributes["gen_ai.usage.input_tokens"] == run.usage["input_tokens"]
    assert root.status.is_ok

    # On the clock: model call, its tool, the next call, the wait, then the paid call.
    chat1, chat2, chat3 = sorted(names["chat demo"], key=lambda s: s.start_time)
    (lookup,) = names["execute_tool lookup"]
    (wait,) = names["await_approval pay_out"]
    (pay,) = names["execute_tool pay_out"]
    assert chat1.end_time <= lookup.start_time <= lookup.end_time <= chat2.start_time
    assert chat2.end_time <= wait.start_time < wait.end_time <= pay.start_time
    assert pay.end_time <= chat3.start_time
    approval = Approval.objects.get(run=run)
    assert wait.start_time == int(approval.requested_at.timestamp() * 1e9)
    assert wait.end_time == int(approval.decided_at.timestamp() * 1e9)
    assert wait.attributes["agentweb.approval.decision"] == "approved"

    # GenAI attributes, integers where the conventions say so; no content by default.
    model_events = RunEvent.objects.filter(run=run, type="model_called").order_by("seq")
    for span, event in zip([chat1, chat2, chat3], model_events, strict=True):
        attrs = span.attributes
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == "demo"
        assert attrs["gen_ai.provider.name"] == "agentweb"
        assert attrs["gen_ai.usage.input_tokens"] == event.data["tokens"]["input"]
        assert type(attrs["gen_ai.usage.output_tokens"]) is int
        assert attrs["gen_ai.response.finish_reasons"] == (event.data["finish_reason"],)
        assert "gen_ai.input.messages" not in attrs and "gen_ai.output.messages" not in attrs
    call_ids = {
        e.data["tool"]: e.data["call_id"]
        for e in RunEvent.objects.filter(run=run, type="tool_call_finished")
    }
    assert pay.attributes["gen_ai.tool.name"] == "pay_out"
    assert pay.attributes["gen_ai.tool.call.id"] == call_ids["pay_out"]
    assert lookup.attributes["gen_ai.tool.call.id"] == call_ids["lookup"]
    assert wait.attributes["gen_ai.tool.call.id"] == call_ids["pay_out"]
    assert "gen_ai.tool.call.arguments" not in pay.attributes


def test_message_content_only_when_asked(
    people, scripted, enqueued, spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    run = run_with_approval(people, scripted, spans)
    names = by_name(spans.get_finished_spans())
    last = max(names["chat demo"], key=lambda s: s.start_time)
    assert "Order A1 never arrived" in last.attributes["gen_ai.input.messages"]
    assert "Paid back 30." in last.attributes["gen_ai.output.messages"]
    (pay,) = names["execute_tool pay_out"]
    assert '"amount": 30' in pay.attributes["gen_ai.tool.call.arguments"]
    assert "paid_out" in pay.attributes["gen_ai.tool.call.result"]
    assert run.status == Run.Status.SUCCEEDED


def test_a_failed_tool_and_a_cancelled_run_are_marked(people, scripted, enqueued, spans) -> None:
    scripted.enqueue(call("pay_out", order_id="A2", amount=-5), "Could not pay.")
    failing = actions.do_create_run(user=people["operator"], task="Order A2")
    assert engine.execute_run(failing.pk) == Run.Status.WAITING_APPROVAL
    approval = Approval.objects.get(run=failing)
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    assert engine.execute_run(failing.pk) == Run.Status.SUCCEEDED  # the payout raised
    (pay,) = by_name(spans.get_finished_spans())["execute_tool pay_out"]
    assert not pay.status.is_ok and pay.attributes["error.type"] == "tool_error"

    scripted.enqueue(call("pay_out", order_id="A3", amount=10))
    waiting = actions.do_create_run(user=people["operator"], task="Order A3")
    assert engine.execute_run(waiting.pk) == Run.Status.WAITING_APPROVAL
    spans.clear()
    actions.do_request_cancel(waiting, people["operator"])  # a person cancels (web)
    (root,) = spans.get_finished_spans()
    assert root.name == "invoke_agent ticket-assistant"
    assert root.attributes["agentweb.run.status"] == "cancelled"
    assert root.context.span_id == int(waiting.trace_span_id, 16)
    assert root.context.trace_id == int(waiting.trace_id, 16)


def test_a_rolled_back_step_leaves_no_span(people, scripted, enqueued, spans) -> None:
    from django.db import transaction

    run = actions.do_create_run(user=people["operator"], task="Order A3")
    with pytest.raises(RuntimeError), transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        actions.append_events(locked, [{"type": "run_failed", "data": {"reason": "x"}}])
        raise RuntimeError("rolled back")
    assert spans.get_finished_spans() == ()


def test_without_an_endpoint_the_sdk_is_never_imported() -> None:
    code = (
        "import os, sys, django;"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'agentweb.settings');"
        "django.setup();"
        "import agentweb.urls, agentweb.runs.engine, agentweb.runs.tasks, agentweb.asgi;"
        "from agentweb.observability import tracing;"
        "assert not tracing.enabled();"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    env["DEBUG"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_environment_decides() -> None:
    assert not tracing.configured({})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"})
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not tracing.configured({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not tracing.configured({**endpoint, "OTEL_TRACES_EXPORTER": "none"})
    assert tracing.configured({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.configured({"OTEL_TRACES_EXPORTER": "otlp"})  # no endpoint


def test_a_child_run_is_a_subtree_of_its_parents_trace(people, team, enqueued, spans) -> None:
    import json

    from agentweb.runtime.messages import ToolMessage

    def wait_for_all(messages: Any, tools: Any) -> Any:
        ids = [json.loads(m.content)["task_id"] for m in messages if isinstance(m, ToolMessage)]
        return call("wait_for_tasks", task_ids=ids)

    delegate = call("delegate_task", agent="obs-billing", task="Was order A1 charged twice?")
    team("obs-lead").enqueue(delegate, wait_for_all, "Refunded the duplicate.")
    team("obs-billing").enqueue(call("lookup", order_id="A1"), "Charged twice; reversed.")
    parent = actions.do_create_run(
        user=people["operator"], task="Charged twice", agent_name="obs-lead"
    )
    enqueued.clear()
    assert engine.execute_run(parent.pk) == Run.Status.WAITING_SUBTASKS
    new_process(spans)
    while enqueued:  # one worker: the child, then the parent it wakes
        engine.execute_run(enqueued.pop(0))
    parent.refresh_from_db()
    assert parent.status == Run.Status.SUCCEEDED, parent.failure_reason
    (child,) = parent.children.all()
    assert child.trace_id == parent.trace_id
    finished = spans.get_finished_spans()
    assert {s.context.trace_id for s in finished} == {int(parent.trace_id, 16)}
    names = by_name(finished)
    (parent_root,) = names["invoke_agent obs-lead"]
    (child_root,) = names["invoke_agent obs-billing"]
    (delegating,) = names["execute_tool delegate_task"]
    assert delegating.parent.span_id == parent_root.context.span_id
    assert delegating.attributes["gen_ai.tool.call.id"] == delegate.id
    assert child_root.parent.span_id == delegating.context.span_id
    assert child_root.context.span_id == int(child.trace_span_id, 16)
    (child_tool,) = names["execute_tool lookup"]
    assert child_tool.parent.span_id == child_root.context.span_id
    assert parent_root.parent is None


def test_the_run_page_shows_the_trace_id(people, scripted, enqueued, client) -> None:
    import re

    scripted.enqueue("Done.")
    run = actions.do_create_run(user=people["operator"], task="Order A9")
    engine.execute_run(run.pk)
    client.force_login(people["operator"])
    body = client.get(f"/runs/{run.pk}/").content.decode()
    shown = re.search(r"<dt>Trace</dt><dd[^>]*>([^<]*)</dd>", body)
    assert shown and shown.group(1) == run.trace_id
    assert re.fullmatch(r"[0-9a-f]{32}", run.trace_id)
    other = actions.do_create_run(user=people["operator"], task="Order A10")
    assert other.trace_id != run.trace_id and other.trace_span_id != run.trace_span_id


def test_the_api_gives_the_trace_id(people, scripted, enqueued, client) -> None:
    run = actions.do_create_run(user=people["operator"], task="Order A11")
    client.force_login(people["operator"])
    body = client.get(f"/api/runs/{run.pk}").json()
    assert body["trace_id"] == run.trace_id
    schema = client.get("/api/openapi.json").json()["components"]["schemas"]["Run"]
    assert "trace_id" in schema["properties"]


def test_sampling_keeps_or_drops_a_run_tree_whole(
    people, scripted, enqueued, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    exporter = InMemorySpanExporter()
    try:
        tracing.use_processor(SimpleSpanProcessor(exporter))
        runs = []
        for i in range(16):
            scripted.enqueue(call("lookup", order_id=f"S{i}"), "Done.")
            run = actions.do_create_run(user=people["operator"], task=f"Order S{i}")
            engine.execute_run(run.pk)
            runs.append(run)
    finally:
        tracing.reset()
    exported = {span.context.trace_id for span in exporter.get_finished_spans()}
    kept = [r for r in runs if int(r.trace_id, 16) in exported]
    assert 0 < len(kept) < len(runs)  # half, by trace id
    for run in kept:  # a kept run has all its spans, a dropped one none
        assert (
            len(
                [
                    s
                    for s in exporter.get_finished_spans()
                    if s.context.trace_id == int(run.trace_id, 16)
                ]
            )
            == 4
        )
