"""A budget as people see it, in Chromium on the live stack (Daphne, a Celery worker, an
OpenAI-compatible model server over HTTP whose replies report their tokens, priced through
AGENTWEB_PRICES): the run page of a run its profile's budget stopped says so in its
header and its last step; /spend/ shows an admin what the team and the profile spent, and
is neither linked nor shown to an operator. Screenshots: /tmp/shots/budget-*.png."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from agentweb.accounts.models import ApiToken
from agentweb.runs.models import AgentProfile
from tests.browser.conftest import Person
from tests.conftest import start_web, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer, oa_call, oa_reply

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

REASON = (
    "budget exhausted: this run (with its sub-runs) has cost $0.0400, the "
    "max_cost_usd_per_run of profile ticket-assistant is $0.0300"
)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def stack(
    stack_env: dict[str, str], llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("budget-pages")
    env = {
        **stack_env,
        "AGENTWEB_MODEL": "openai:fake-priced",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_PRICES": "fake-priced=10/10",  # $ per million tokens, in / out
        "AGENTWEB_QUEUE": f"budget-pages-{os.getpid()}",
    }
    worker = start_worker(env, tmp, "budget-pages-worker", concurrency=2)
    web, url = start_web(env, tmp)
    yield url
    web.stop()
    worker.stop()


def test_a_budget_stopped_run_and_the_spend_page(
    browser: Any, stack: str, llm: FakeLLMServer, demo: dict[str, Any]
) -> None:
    call_command(
        "teams", "add", "Returns", "--queues", "returns", "--members", "operator",
        "--daily-cost-usd", "1", stdout=open(os.devnull, "w"),  # noqa: SIM115
    )  # fmt: skip
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
    headers = {"Authorization": f"Bearer {ApiToken.issue(demo['operator'])}"}
    with httpx.Client(base_url=stack, headers=headers, timeout=10) as api:
        created = api.post("/api/runs", json={"task": "Where is order A1001?"})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        wait_for(lambda: api.get(f"/api/runs/{run_id}").json()["status"] == "failed", 60)

    operator = Person(browser, stack, "operator", demo["password"])
    admin = Person(browser, stack, "admin", demo["password"])
    try:
        operator.goto(f"/runs/{run_id}/")
        page = operator.page
        assert page.locator(".status-failed, .badge").first.inner_text().strip() == "Failed"
        assert f"Failed: {REASON}" in page.locator("main").inner_text()
        last = page.locator("li.ev").last
        assert last.get_attribute("data-type") == "run_failed"
        assert "max_cost_usd_per_run of profile ticket-assistant" in last.inner_text()
        operator.shot("budget-run-failed")
        # An operator has no Spend in the menu, and the page is refused.
        assert page.get_by_role("link", name="Spend").count() == 0
        answer = page.goto(f"{stack}/spend/")
        assert answer is not None and answer.status == 403

        admin.goto("/tickets/")
        admin.page.get_by_role("link", name="Spend").first.click()
        admin.page.wait_for_url(f"{stack}/spend/")
        team = admin.page.locator("#spend-teams tr", has_text="Returns").inner_text()
        assert "$0.0400" in team and "$1.00" in team and "4 %" in team, team
        row = admin.page.locator("#spend-profiles tr", has_text="ticket-assistant").inner_text()
        assert "$0.0400" in row and "$0.03" in row, row
        admin.shot("budget-spend")
        assert operator.errors == [] and admin.errors == [], (operator.errors, admin.errors)
    finally:
        operator.close()
        admin.close()
