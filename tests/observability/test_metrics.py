"""/metrics in-process: token, format, and the counts of scripted runs."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentweb.observability import metrics
from agentweb.runs import actions, engine
from agentweb.runs.models import Approval, Run
from agentweb.runtime.testing import call


def scrape(client: Any, token: str = "metrics-secret") -> dict[tuple[str, tuple], float]:
    metrics.flush()
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@pytest.fixture
def fresh_metrics(settings: Any) -> None:
    settings.AGENTWEB_METRICS_TOKEN = "metrics-secret"
    settings.CELERY_TASK_DEFAULT_QUEUE = "metrics-test"
    metrics.flush()
    metrics._redis().delete(metrics.redis_key())


def test_it_wants_the_bearer_token(client, settings, fresh_metrics) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic metrics-secret").status_code == 401
    assert client.post("/metrics", HTTP_AUTHORIZATION="Bearer metrics-secret").status_code == 405
    settings.AGENTWEB_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


def test_it_counts_runs_calls_tokens_and_approvals(
    client, people, scripted, enqueued, fresh_metrics
) -> None:
    scripted.enqueue(call("lookup", order_id="A1"), call("pay_out", order_id="A1", amount=30))
    run = actions.do_create_run(user=people["operator"], task="Order A1")
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    s = scrape(client)
    assert s[("agentweb_approvals_pending", ())] == 1
    assert s[("agentweb_runs_active", (("status", "waiting_approval"),))] == 1
    assert s[("agentweb_runs_started_total", (("agent", "ticket-assistant"),))] == 1
    assert s[("agentweb_tool_call_duration_seconds_count", (("tool", "lookup"),))] == 1

    scripted.enqueue("Paid back 30.")
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    s = scrape(client)
    assert s[("agentweb_approvals_pending", ())] == 0
    assert s[("agentweb_approval_wait_seconds_count", ())] == 1
    assert s[("agentweb_approval_wait_seconds_bucket", (("le", "+Inf"),))] == 1
    done = (("agent", "ticket-assistant"), ("status", "succeeded"))
    assert s[("agentweb_runs_total", done)] == 1
    assert s[("agentweb_run_duration_seconds_count", ())] == 1
    model = (("model", "scripted"),)  # the model that answered
    assert s[("agentweb_model_call_duration_seconds_count", model)] == 3
    assert (
        s[("agentweb_tokens_total", (("model", "scripted"), ("type", "input")))]
        == run.usage["input_tokens"]
    )
    assert (
        s[("agentweb_tokens_total", (("model", "scripted"), ("type", "output")))]
        == run.usage["output_tokens"]
    )
    assert s[("agentweb_tool_call_duration_seconds_count", (("tool", "pay_out"),))] == 1
    assert ("agentweb_tool_errors_total", (("tool", "pay_out"),)) not in s
    # Buckets are cumulative and end in the count.
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in s.items()
        if name == "agentweb_model_call_duration_seconds_bucket"
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert buckets[-1] == (float("inf"), 3)


def test_a_failing_tool_counts_as_an_error(client, people, scripted, enqueued, fresh_metrics):
    scripted.enqueue(call("pay_out", order_id="A2", amount=-1), "Could not pay.")
    run = actions.do_create_run(user=people["operator"], task="Order A2")
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    engine.execute_run(run.pk)
    s = scrape(client)
    assert s[("agentweb_tool_errors_total", (("tool", "pay_out"),))] == 1


def test_label_values_are_escaped_and_bounded(client, fresh_metrics, transactional_db) -> None:
    batch = metrics._Batch()
    batch.inc("agentweb_tool_errors_total", ['we"ird\ntool\\' + "x" * 500])
    with metrics._buffer.lock:
        for field, amount in batch.ints:
            metrics._buffer.add(field, amount)
    s = scrape(client)
    ((labels, value),) = [(k[1], v) for k, v in s.items() if k[0] == "agentweb_tool_errors_total"]
    assert value == 1
    assert dict(labels)["tool"] == ('we"ird\ntool\\' + "x" * 500)[: metrics.LABEL_MAX]
