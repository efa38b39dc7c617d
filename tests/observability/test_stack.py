"""Observability with real processes: a web process and two workers, JSON logs, traces
sent over OTLP/HTTP to a local receiver, /metrics scraped from the web process."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentweb.runs.models import Approval, Run, RunEvent
from tests.conftest import Proc, start_beat, start_web, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer, Recorded, Reply, oa_call, oa_reply
from tests.fakes.otlp_sink import OtlpSink

pytestmark = pytest.mark.e2e

TOKEN = "scrape-secret-123"


def respond(req: Recorded) -> Reply:
    """Look the order up; a task that says "pay" then asks to pay 30 (needs approval)."""
    messages = req.json["messages"]
    task = next(m for m in messages if m["role"] == "user")["content"]
    order = task.split()[-1]
    done = [m for m in messages if m["role"] == "tool"]
    if not done:
        return Reply(json=oa_reply(tool_calls=[oa_call("c-1", "lookup", {"order_id": order})]))
    if "pay" in task and len(done) == 1:
        call = oa_call("c-2", "pay_out", {"order_id": order, "amount": 30})
        return Reply(json=oa_reply(tool_calls=[call]))
    return Reply(json=oa_reply(content=f"Done with {order}."))


@pytest.fixture(scope="module")
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def stack(
    stack_env: dict[str, str], sink: OtlpSink, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    llm = FakeLLMServer()
    llm.responder = respond
    env = {
        **stack_env,
        "AGENTWEB_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_TOOLS": "tests.runs.sample_tools",
        "AGENTWEB_QUEUE": f"obs-{os.getpid()}",
        "AGENTWEB_METRICS_TOKEN": TOKEN,
        "AGENTWEB_LOG_FORMAT": "json",
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": "agentweb-test",
    }
    tmp = tmp_path_factory.mktemp("obs")
    procs: list[Proc] = []
    try:
        web, url = start_web(env, tmp)
        procs.append(web)
        procs.append(start_worker(env, tmp, "obs-a", concurrency=2))
        procs.append(start_worker(env, tmp, "obs-b", concurrency=2))
        beat = start_beat(env, tmp)
        procs.append(beat)
        yield {"url": url, "web": web, "workers": procs[1:3], "beat": beat, "env": env}
    finally:
        for proc in reversed(procs):
            proc.stop()
        llm.close()


def api(url: str, user: Any) -> httpx.Client:
    from agentweb.accounts.models import ApiToken

    token = ApiToken.issue(user)
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=15)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    out = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def run_batch(stack: dict[str, Any], people: dict[str, Any]) -> list[int]:
    """Four plain runs and two that pause for approval, approved through the API."""
    operator = api(stack["url"], people["operator"])
    approver = api(stack["url"], people["approver"])
    ids = []
    for i in range(6):
        task = f"Please pay back order P{i}" if i < 2 else f"Check order C{i}"
        created = operator.post("/api/runs", json={"task": task})
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    for run_id in ids[:2]:
        wait_for(lambda r=run_id: Approval.objects.filter(run_id=r, status="pending").first(), 30)
        approval = Approval.objects.get(run_id=run_id)
        decided = approver.post(
            f"/api/approvals/{approval.pk}/decide", json={"decision": "approve"}
        )
        assert decided.status_code == 200, decided.text
    wait_for(lambda: Run.objects.filter(pk__in=ids, status="succeeded").count() == 6, 60)
    return ids


def test_metrics_traces_and_logs_cover_every_process(people, stack, sink) -> None:
    assert httpx.get(f"{stack['url']}/metrics").status_code == 401  # Django logs a warning
    before = scrape(stack["url"])
    ids = run_batch(stack, people)

    # --- metrics: what the workers and the web process stored, as the DB says.
    def counted() -> Any:
        s = scrape(stack["url"])
        key = ("agentweb_runs_total", (("agent", "ticket-assistant"), ("status", "succeeded")))
        wait = ("agentweb_approval_wait_seconds_count", ())  # counted by the web process
        runs_done = s.get(key, 0) - before.get(key, 0) == 6
        return s if runs_done and s.get(wait, 0) - before.get(wait, 0) == 2 else None

    s = wait_for(counted, 10)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return s.get(key, 0) - before.get(key, 0)

    events = RunEvent.objects.filter(run_id__in=ids)
    model_calls = events.filter(type="model_called")
    tokens_in = sum(e.data["tokens"]["input"] for e in model_calls)
    assert delta("agentweb_model_call_duration_seconds_count", model="fake-model") == 6 * 2 + 2
    assert delta("agentweb_tokens_total", model="fake-model", type="input") == tokens_in
    assert delta("agentweb_tool_call_duration_seconds_count", tool="lookup") == 6
    assert delta("agentweb_tool_call_duration_seconds_count", tool="pay_out") == 2
    assert delta("agentweb_approval_wait_seconds_count") == 2
    assert delta("agentweb_run_duration_seconds_count") == 6
    assert s[("agentweb_approvals_pending", ())] == 0

    # --- traces: one trace per run, spans from the workers and the web process.
    paused = Run.objects.get(pk=ids[0])
    expected = {
        f"invoke_agent {paused.agent.name}",
        "chat fake-model",
        "execute_tool lookup",
        "await_approval pay_out",
        "execute_tool pay_out",
    }
    spans = wait_for(
        lambda: (
            sink.of_trace(paused.trace_id)
            if {x.name for x in sink.of_trace(paused.trace_id)} >= expected
            else None
        ),
        15,
    )
    assert len(spans) == 3 + 2 + 1 + 1
    (root,) = [x for x in spans if x.name.startswith("invoke_agent")]
    assert root.span_id == paused.trace_span_id and root.parent_span_id == ""
    assert all(x.parent_span_id == root.span_id for x in spans if x is not root)
    assert {x.service for x in spans} == {"agentweb-test"}
    assert {x.process for x in spans} == {"web", "worker"}  # the decision was the web's
    (wait,) = [x for x in spans if x.name == "await_approval pay_out"]
    assert wait.process == "web"
    chat = [x for x in spans if x.name == "chat fake-model"]
    assert {x.attributes["gen_ai.provider.name"] for x in chat} == {"openai"}
    assert all(isinstance(x.attributes["gen_ai.usage.input_tokens"], int) for x in chat)
    for run_id in ids[2:]:
        run = Run.objects.get(pk=run_id)
        wait_for(lambda r=run: len(sink.of_trace(r.trace_id)) == 4, 10)  # root, 2 chats, tool

    # --- logs: after start-up, every line is one JSON object; run lines carry the ids.
    def lines(proc: Proc) -> list[dict[str, Any]]:
        text = proc.output()
        out = []
        started = False
        for line in text.splitlines():
            if not started:  # Celery prints its banner (plain text) before start-up ends
                started = line.startswith("{")
                if not started:
                    continue
            out.append(json.loads(line))  # fails on any line that is not JSON
        return out

    web = lines(stack["web"])
    assert web and {x["process"] for x in web} == {"web"}
    access = [x for x in web if x["logger"] == "agentweb.access"]
    assert any(x["path"] == "/api/runs" and x["method"] == "POST" for x in access)
    assert any(x["path"] == "/metrics" and x["status"] == 200 for x in access)
    assert any(x["logger"] == "django.request" and x["status_code"] == 401 for x in web)
    workers = [x for proc in stack["workers"] for x in lines(proc)]
    assert {x["process"] for x in workers} == {"worker"}
    assert any(x["message"].endswith(" ready.") for x in workers)
    beat = wait_for(lambda: [x for x in lines(stack["beat"]) if "due task" in x["message"]], 15)
    assert {x["process"] for x in lines(stack["beat"])} == {"beat"} and beat
    for run_id in ids:
        run = Run.objects.get(pk=run_id)
        mine = [x for x in workers if x.get("run_id") == run_id]
        assert mine and all(x["trace_id"] == run.trace_id for x in mine)
        ended = [x for x in mine if x["message"] == f"run {run_id}: succeeded"]
        assert ended and ended[0]["level"] == "INFO"
        assert any("picked it up" in x["message"] for x in mine)
