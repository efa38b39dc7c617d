"""Edit & approve of an MCP server's call, in Chromium, with the real stack: web, beat and a
Celery worker, a fake model over HTTP, and our faulty server (tests/fakes/mcp_faulty.py)
started by the worker over stdio, added through the API while everything runs.

The card's form is built from the input schema the server stated (``account`` text,
``amount`` a number); a value the schema refuses is an error beside its field and decides
nothing; the edited arguments are what the server gets, once, under the run-scoped key.
Screenshots: /tmp/shots/mcp-edit-<what>-<width>.png."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentweb.runs.models import Approval, Run, RunEvent
from tests.browser.conftest import Person
from tests.conftest import start_beat, start_web, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer
from tests.mcpservers.test_e2e import add_profile, add_server, calls_in_turn, start_run

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def stack(
    stack_env: dict[str, str], llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    env = {
        **stack_env,
        "AGENTWEB_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_QUEUE": f"browser-mcp-{os.getpid()}",
    }
    tmp = tmp_path_factory.mktemp("browser-mcp")
    web, url = start_web(env, tmp)
    beat = start_beat(env, tmp)
    worker = start_worker(env, tmp, "mcp-worker")
    yield {"url": url, "env": env, "tmp": tmp, "worker": worker}
    worker.stop()
    beat.stop()
    web.stop()


def _ledger(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("width", [1440, 390])
def test_edit_and_approve_an_mcp_call_sends_the_edited_arguments_once(
    browser: Any, demo: dict[str, Any], stack: dict[str, Any], llm: FakeLLMServer,
    tmp_path: Path, width: int,
) -> None:  # fmt: skip
    ledger = tmp_path / "ledger"
    server, agent = f"pay{width}", f"payer{width}"
    add_server(stack, server, ledger)
    add_profile(stack, agent, [f"{server}__*"])
    llm.responder = calls_in_turn((f"{server}__transfer", {"account": "ACME", "amount": 250.0}))
    run_id = start_run(stack, agent, "Pay ACME 250")
    wait_for(lambda: Run.objects.filter(pk=run_id, status="waiting_approval").exists(), 60, 0.2)
    [approval] = Approval.objects.filter(run_id=run_id)
    assert (approval.tool, approval.risk) == (f"{server}__transfer", "high")

    approver = Person(browser, stack["url"], "approver", demo["password"], width=width)
    try:
        page = approver.page
        approver.goto("/approvals/")
        card = page.locator(f"#inbox-{approval.pk}")
        card.wait_for()
        assert f"{server}__transfer" in card.inner_text()
        card.locator("details.edit > summary").click()
        # The form follows the server's schema: account as text, amount as a number.
        account = card.locator('[name="arg.account"]')
        amount = card.locator('[name="arg.amount"]')
        assert account.input_value() == "ACME"
        assert amount.get_attribute("type") == "number" and float(amount.input_value()) == 250
        approver.shot(f"mcp-edit-form-{width}")
        # An amount the schema refuses stays on the card, beside its field.
        amount.fill("")
        card.get_by_role("button", name="Approve with these arguments").click()
        error = page.locator(f"#inbox-{approval.pk} [data-arg=amount] .field-error")
        error.wait_for()
        assert error.inner_text() == "required"
        approver.shot(f"mcp-edit-error-{width}")
        assert Approval.objects.get(pk=approval.pk).status == "pending"
        assert _ledger(ledger) == []
        # Corrected and approved: the server gets the edited arguments, once.
        amount.fill("80")
        account.fill("ACME-EU")
        card.get_by_role("button", name="Approve with these arguments").click()
        wait_for(lambda: Approval.objects.get(pk=approval.pk).status == "approved", 10)
        decided = Approval.objects.get(pk=approval.pk)
        assert decided.edited_arguments == {"account": "ACME-EU", "amount": 80}
        run = wait_for(lambda: Run.objects.filter(pk=run_id, status__in=Run.FINAL).first(), 90)
        assert run.status == "succeeded", run.failure_reason
        [entry] = _ledger(ledger)
        assert entry["replayed"] is False
        assert entry["arguments"] == {"account": "ACME-EU", "amount": 80}
        assert entry["idempotency_key"] == f"{run_id}:{approval.call_id}"
        finished = RunEvent.objects.get(run_id=run_id, type="tool_call_finished").data
        assert finished["ok"] and finished["result"] == {"result": "moved 80.00 to ACME-EU"}
        # The run page shows what was asked, what the approver changed, and the result.
        approver.goto(f"/runs/{run_id}/")
        timeline = page.locator("#timeline, main").first.inner_text()
        assert "moved 80.00 to ACME-EU" in timeline
        approver.shot(f"mcp-edit-run-{width}")
        assert approver.errors == [], approver.errors
    finally:
        approver.close()
