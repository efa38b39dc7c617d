"""The proof of suites on a domain nobody here wrote (the IT helpdesk example): a suite
whose cases carry the gold write actions passes every case with a model that makes them,
fails exactly the cases where a model drops or adds a write, and the helpdesk's directory
is the same after both experiments (every write was a dry run's would-call)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.accounts.roles import ensure_roles
from agentweb.runs import agents, engine, queue
from agentweb.runs.models import Approval, ToolExecution
from agentweb.runtime.messages import Message, ToolMessage, UserMessage
from agentweb.runtime.testing import ScriptedModel, call
from examples.helpdesk import directory

ROOT = Path(__file__).resolve().parents[2]
WRITES = ["unlock_account", "reset_password", "assign_licence", "open_hardware_ticket"]

#: task -> the gold write (None: the case must change nothing)
GOLD: dict[str, Any] = {
    "b.osei is locked out after too many tries": ("unlock_account", {"username": "b.osei"}),
    "a.kim forgot her password": ("reset_password", {"username": "a.kim"}),
    "Which laptop does m.ross use?": None,
}
SUITE = {
    "name": "helpdesk gold",
    "cases": [
        {"name": "unlock", "task": "b.osei is locked out after too many tries",
         "expect": {"calls": [{"tool": "unlock_account", "arguments": {"username": "b.osei"}}]}},
        {"name": "reset", "task": "a.kim forgot her password",
         "expect": {"calls": [{"tool": "reset_password", "arguments": {"username": "a.kim"}}]}},
        {"name": "read only", "task": "Which laptop does m.ross use?",
         "expect": {"no_calls": WRITES}},
    ],
}  # fmt: skip


@pytest.fixture
def helpdesk(
    transactional_db: None, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    settings.AGENTWEB_TOOLS = ["examples.helpdesk.tools"]
    agents.registry.cache_clear()
    directory.reset()
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: None)
    groups = ensure_roles()
    user = get_user_model().objects.create_user("operator", password="pw-123456789")
    user.groups.add(groups["operator"])
    call_command("agents", "import", str(ROOT / "examples" / "helpdesk" / "agents.yaml"))
    yield get_user_model().objects.get(pk=user.pk)
    agents.registry.cache_clear()
    directory.reset()


def model(drop: set[str], add: set[str]) -> ScriptedModel:
    """Plays each task: its gold write (unless the task is in ``drop``), a write that is
    not gold (for a task in ``add``), then an answer that claims nothing."""

    def reply(messages: Sequence[Message], tools: Any) -> Any:
        task = next(m.content for m in messages if isinstance(m, UserMessage))
        if any(isinstance(m, ToolMessage) for m in messages):
            return "Summary: the calls above are what I propose."
        gold = GOLD[task]
        calls = [call("find_account", query=task.split()[0])]
        if gold is not None and task not in drop:
            calls.append(call(gold[0], **gold[1], reason="as asked"))
        if task in add:
            calls.append(call("open_hardware_ticket", asset_tag="LT-1999", problem="slow"))
        return calls

    return ScriptedModel([reply] * 100)


def snapshot() -> Any:
    d = directory.DIRECTORY
    return copy.deepcopy((d.accounts, d.devices, d.done, d.tickets))


def experiment(client: Client, scripted: ScriptedModel, monkeypatch: Any) -> dict[str, Any]:
    monkeypatch.setattr(agents, "model_for", lambda spec: scripted)
    body = json.dumps({"agent": "helpdesk"})
    made = client.post(
        "/api/suites/helpdesk%20gold/experiments", data=body, content_type="application/json"
    )
    assert made.status_code == 201, made.json()
    for case in made.json()["cases"]:
        assert engine.execute_run(case["run"]) == "succeeded"
    return client.get(f"/api/experiments/{made.json()['id']}").json()


def test_gold_writes_pass_and_a_dropped_or_added_write_fails_its_case(helpdesk, monkeypatch):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(helpdesk)}")
    made = client.post("/api/suites", data=json.dumps(SUITE), content_type="application/json")
    assert made.status_code == 201, made.json()
    before = snapshot()
    good = experiment(client, model(drop=set(), add=set()), monkeypatch)
    assert good["status"] == "done" and (good["passed"], good["total"]) == (3, 3), good
    worse = experiment(
        client,
        model(
            drop={"b.osei is locked out after too many tries"},
            add={"Which laptop does m.ross use?"},
        ),
        monkeypatch,
    )
    assert (worse["passed"], worse["total"]) == (1, 3)
    verdict = {c["name"]: (c["passed"], c["failures"]) for c in worse["cases"]}
    assert verdict["reset"] == (True, [])
    assert verdict["unlock"][0] is False and "unlock_account" in verdict["unlock"][1][0]
    assert verdict["read only"] == (
        False,
        ["called open_hardware_ticket, which this case must not"],
    )
    assert snapshot() == before  # the directory: nothing unlocked, reset or ticketed
    assert not ToolExecution.objects.filter(tool__in=WRITES).exists()
    assert not Approval.objects.exists()
