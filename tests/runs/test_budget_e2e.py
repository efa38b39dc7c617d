"""A budget on the live stack: Daphne and a real Celery worker, an OpenAI-compatible model
server over HTTP (tests/fakes/llm_server.py) whose replies report their tokens, priced
through AGENTWEB_PRICES. The run stops before the call that would pass the budget, the
server never gets it, the run page and the API say why, /metrics counts it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentweb.accounts.models import ApiToken
from agentweb.runs.models import AgentProfile
from tests.conftest import Proc, start_web, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer, oa_call, oa_reply

pytestmark = pytest.mark.e2e

QUEUE = f"budget-{os.getpid()}"
METRICS_TOKEN = "metrics-secret-123"


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def stack(
    stack_env: dict[str, str], llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("budget-stack")
    env = {
        **stack_env,
        "AGENTWEB_MODEL": "openai:fake-priced",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_PRICES": "fake-priced=10/10",  # $ per million tokens, in / out
        "AGENTWEB_METRICS_TOKEN": METRICS_TOKEN,
        "AGENTWEB_QUEUE": QUEUE,
    }
    worker: Proc = start_worker(env, tmp, "budget-worker", concurrency=2)
    (tmp / "web").mkdir()
    web, url = start_web(env, tmp / "web")
    yield url
    web.stop()
    worker.stop()


def test_a_budget_stops_a_live_run_before_the_call_that_would_pass_it(
    stack: str, llm: FakeLLMServer, demo: dict[str, Any]
) -> None:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.budget = {"max_cost_usd_per_run": 0.03}
    profile.save()
    for n in range(3):  # each reply: 1,000 + 1,000 tokens = $0.02
        llm.enqueue(
            oa_reply(
                tool_calls=[oa_call(f"call_{n}", "get_order", {"order_id": "A1001"})],
                usage=(1000, 1000),
                model="fake-priced",
            )
        )
    before = len(llm.requests)
    counted_before = exhausted(stack)
    token = ApiToken.issue(demo["operator"])
    api = httpx.Client(base_url=stack, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    created = api.post("/api/runs", json={"task": "Where is order A1001?"})
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    run = wait_for(
        lambda: (r := api.get(f"/api/runs/{run_id}").json())["status"] == "failed" and r,
        timeout=60,
    )
    assert run["failure_reason"] == (
        "budget exhausted: this run (with its sub-runs) has cost $0.0400, the "
        "max_cost_usd_per_run of profile ticket-assistant is $0.0300"
    )
    assert run["usage"]["cost_usd"] == pytest.approx(0.04)
    assert len(llm.requests) - before == 2  # the third call never reached the server
    events = api.get(f"/api/runs/{run_id}/events").json()["events"]
    assert events[-1]["type"] == "run_failed" and events[-1]["data"]["budget"] == "run_cost"
    with httpx.Client(base_url=stack) as browser:
        browser.get("/accounts/login/")
        browser.post(
            "/accounts/login/",
            data={
                "username": "operator",
                "password": demo["password"],
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            },
        )
        page = browser.get(f"/runs/{run_id}/").text
    assert "Failed: budget exhausted: this run (with its sub-runs) has cost $0.0400" in page

    assert wait_for(lambda: exhausted(stack) == counted_before + 1, timeout=10)


def exhausted(stack: str) -> float:
    """``agentweb_budget_exhausted_total{scope="run_cost"}`` as /metrics says it."""
    text = httpx.get(f"{stack}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    prefix = 'agentweb_budget_exhausted_total{scope="run_cost"} '
    return next(
        (float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)), 0.0
    )
