"""The IT helpdesk domain end to end, as an integrator runs it: its profile file through
`manage.py agents import`, then API → Redis → a real Celery worker → its own scripted
demo model and tools → approvals, with AGENTWEB_TOOLS naming only the helpdesk (the
ticket domain is not loaded)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, Proc, start_web, start_worker, wait_for

pytestmark = pytest.mark.e2e

HELPDESK_TOOLS = {
    "find_account", "get_account", "get_device", "licence_seats", "unlock_account",
    "reset_password", "assign_licence", "open_hardware_ticket", "create_account",
}  # fmt: skip


@pytest.fixture(scope="module")
def env(stack_env: dict[str, str]) -> dict[str, str]:
    return {
        **stack_env,
        "AGENTWEB_TOOLS": "examples.helpdesk.tools",
        "AGENTWEB_MODEL": "demo",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_QUEUE": f"helpdesk-{os.getpid()}",
    }


@pytest.fixture(scope="module")
def stack(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("helpdesk")
    web, url = start_web(env, tmp)
    worker = start_worker(env, tmp, "helpdesk-worker")
    procs: list[Proc] = [worker, web]
    yield url
    for proc in procs:
        proc.stop()


def token(username: str) -> dict[str, str]:
    from django.contrib.auth import get_user_model

    from agentweb.accounts.models import ApiToken

    user = get_user_model().objects.get(username=username)
    return {"Authorization": f"Bearer {ApiToken.issue(user)}"}


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def final(client: httpx.Client, run_id: int, statuses: tuple[str, ...]) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        run = client.get(f"/api/runs/{run_id}").json()
        return run if run["status"] in statuses else None

    return wait_for(done, timeout=60)  # type: ignore[no-any-return]


def test_the_helpdesk_runs_through_api_worker_and_approvals(demo, env, stack) -> None:
    imported = manage(env, "agents", "import", "examples/helpdesk/agents.yaml")
    assert imported.returncode == 0, imported.stderr
    assert "2 created (helpdesk, helpdesk-readonly)" in imported.stdout
    exported = manage(env, "agents", "export", "helpdesk")
    assert '"validator": "examples.helpdesk.checks.claims_done"' in exported.stdout

    operator = httpx.Client(base_url=stack, headers=token("operator"), timeout=10)
    approver = httpx.Client(base_url=stack, headers=token("approver"), timeout=10)

    # A password reset: needs a person.
    created = operator.post(
        "/api/runs", json={"task": "Hi, this is a.kim, I forgot my password", "agent": "helpdesk"}
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    assert final(operator, run_id, ("waiting_approval",))["agent"] == "helpdesk"
    pending = approver.get("/api/approvals", params={"status": "pending"}).json()["approvals"]
    mine = [a for a in pending if a["run"] == run_id]
    assert [a["tool"] for a in mine] == ["reset_password"]
    assert mine[0]["arguments"]["username"] == "a.kim"
    decided = approver.post(f"/api/approvals/{mine[0]['id']}/decide", json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    run = final(operator, run_id, ("succeeded", "failed"))
    assert run["status"] == "succeeded", run
    assert "a one-time link went to alex.kim@example.com" in run["final_answer"]

    events = operator.get(f"/api/runs/{run_id}/events", params={"after": 0}).json()["events"]
    started = next(e for e in events if e["type"] == "run_started")["data"]
    assert set(started["tools"]) == HELPDESK_TOOLS  # no ticket tool anywhere
    assert started["scripted"] is True and started["model"] == "demo"
    finished = [e["data"] for e in events if e["type"] == "tool_call_finished"]
    assert [(f["tool"], f["ok"]) for f in finished] == [
        ("get_account", True),
        ("reset_password", True),
    ]
    assert not [e for e in events if e["type"] == "completion_objected"]

    # A paid licence the approver rejects: the answer says so and nothing is assigned.
    created = operator.post(
        "/api/runs", json={"task": "Please give b.osei a figma licence", "agent": "helpdesk"}
    )
    run_id = created.json()["id"]
    final(operator, run_id, ("waiting_approval",))
    pending = approver.get("/api/approvals", params={"status": "pending"}).json()["approvals"]
    (approval,) = [a for a in pending if a["run"] == run_id]
    assert approval["tool"] == "assign_licence"
    approver.post(
        f"/api/approvals/{approval['id']}/decide",
        json={"decision": "reject", "comment": "no budget this quarter"},
    )
    run = final(operator, run_id, ("succeeded", "failed"))
    assert "rejected assign_licence (no budget this quarter)" in run["final_answer"]
