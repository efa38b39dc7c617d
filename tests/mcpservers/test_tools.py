"""An MCP server's tools in the application: in the registry of every process within
seconds, in profiles by name or as ``<server>__*``, under the same risk, approval,
``sum_per`` and journal rules as our own tools (the engine in this process, our faulty
server over stdio)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agentweb.accounts.models import ApiToken
from agentweb.mcpservers import source
from agentweb.mcpservers.models import McpServer
from agentweb.runs import actions, agents, engine, toolset
from agentweb.runs.models import AgentProfile, Approval, Run, RunEvent, ToolExecution
from agentweb.runtime.messages import ToolCall
from agentweb.runtime.testing import call
from tests.mcpservers.conftest import faulty, with_tools

ECHO = {
    "name": "echo",
    "description": "Say it back.",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
}
WIPE = {"name": "wipe.all", "input_schema": {"type": "object"}, "annotations": {}}


def test_a_servers_tools_join_the_registry_with_their_risk(people: dict[str, Any]) -> None:
    with_tools("crm", [ECHO, WIPE])
    registry = agents.registry()
    echo, wipe = registry.get("crm__echo"), registry.get("crm__wipe_all")
    assert echo is not None and echo.risk == "low" and echo.description == "Say it back."
    assert echo.spec().parameters == ECHO["input_schema"]
    assert wipe is not None and wipe.risk == "high"
    assert "crm" in agents.tool_sources.families()


def test_a_change_made_by_another_process_is_seen_within_the_poll(
    people: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "POLL_SECONDS", 0.2)
    server = with_tools("crm", [ECHO])
    assert "crm__echo" in agents.registry()
    # As a worker's listener writes it: the row only, nothing told to this process.
    McpServer.objects.filter(pk=server.pk).update(tools=[ECHO, WIPE], updated_at=timezone.now())
    deadline = time.monotonic() + 5
    while "crm__wipe_all" not in agents.registry():
        assert time.monotonic() < deadline, "the new tool never appeared"
        time.sleep(0.05)
    McpServer.objects.filter(pk=server.pk).delete()
    deadline = time.monotonic() + 5
    while "crm__echo" in agents.registry():
        assert time.monotonic() < deadline, "the removed server's tools stayed"
        time.sleep(0.05)


def _admin(people: dict[str, Any]) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(people['admin'])}")


def _profile(client: Client, allowed: list[str], **more: Any) -> Any:
    body = {"name": "crm-agent", "system_prompt": "Help.", "allowed_tools": allowed, **more}
    return client.post("/api/agents", json.dumps(body), content_type="application/json")


def test_profiles_allow_a_servers_tools_by_name_or_all_of_them(people: dict[str, Any]) -> None:
    with_tools("crm", [ECHO, WIPE])
    client = _admin(people)
    assert _profile(client, ["crm__echo"]).status_code == 201
    AgentProfile.objects.filter(name="crm-agent").delete()
    assert _profile(client, ["crm__*", "get_order"]).status_code == 201
    profile = AgentProfile.objects.get(name="crm-agent")
    assert toolset.allowed_tools(profile) == ["crm__echo", "crm__wipe_all", "get_order"]
    AgentProfile.objects.filter(name="crm-agent").delete()
    for unknown in (["crm__nope"], ["other__*"], ["crm__"]):
        refused = _profile(client, unknown)
        assert refused.status_code == 422, unknown
        assert "unknown tools" in refused.json()["error"]["details"]["allowed_tools"]
    # Risk overrides and policies name tools one by one, as for our own tools.
    assert _profile(client, ["crm__*"], risk_overrides={"crm__*": "low"}).status_code == 422
    assert _profile(client, ["crm__*"], risk_overrides={"crm__echo": "high"}).status_code == 201


def test_a_profile_that_names_no_tools_gets_no_servers_tools(people: dict[str, Any]) -> None:
    with_tools("crm", [ECHO])
    everything = AgentProfile.objects.get(name="ticket-assistant")
    assert everything.allowed_tools == []
    assert "crm__echo" not in toolset.allowed_tools(everything)
    assert "get_order" in toolset.allowed_tools(everything)
    # And what people read says so (it said "every registered tool", "all registered").
    client = Client()
    client.force_login(people["admin"])
    form = client.get("/agents/new/").content.decode()
    says = "none ticked: every tool of the <code>AGENTWEB_TOOLS</code> modules, none of an MCP"
    assert says in form
    listing = client.get("/agents/").content.decode()
    assert "all module tools" in listing and "all registered" not in listing
    schema = client.get("/api/openapi.json").json()["components"]["schemas"]
    described = [
        s["properties"]["allowed_tools"].get("description", "")
        for s in schema.values()
        if "allowed_tools" in s.get("properties", {})
    ]
    assert described and all("no MCP server's" in d for d in described), described


@pytest.mark.parametrize("allowed", [[], ["crm__echo", "lookup"]], ids=["none-named", "named"])
def test_the_prompts_tools_are_the_ones_the_run_is_offered(
    people, scripted, enqueued, allowed: list[str]
) -> None:
    """``{{tools}}`` in a prompt ("Available tools: {{tools}}", as the seeded workbench
    profile says) named every tool of the process, a server's too: the model was told of
    tools it could not call (a profile that names none of them included)."""
    with_tools("crm", [ECHO, WIPE])
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.allowed_tools = allowed
    profile.system_prompt = "Help. Available tools: {{tools}}."
    profile.validator = ""
    profile.save()
    scripted.enqueue("Done.")
    run = actions.do_create_run(user=people["operator"], task="help")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    [request] = scripted.requests
    system = request.messages[0]
    assert system.role == "system"
    listed = system.content.split("Available tools: ", 1)[1].removesuffix(".").split(", ")
    assert sorted(listed) == sorted(t.name for t in request.tools)
    assert ("crm__echo" in listed) == ("crm__echo" in allowed)
    assert "crm__wipe_all" not in listed
    if not allowed:
        assert sorted(listed) == sorted(toolset.module_tools().names())


def test_the_profile_form_lists_the_servers_tools(people: dict[str, Any]) -> None:
    with_tools("crm", [ECHO, WIPE])
    client = Client()
    client.force_login(people["admin"])
    page = client.get("/agents/new/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "crm__echo" in text and "crm__wipe_all" in text and "crm__*" in text


# -- the engine with a real server ---------------------------------------------------------

RULE = {"argument": "amount", "at_least": 20, "sum_per": "account"}


@pytest.fixture
def mcp_profile(people: dict[str, Any], tmp_path: Any) -> dict[str, Any]:
    ledger = tmp_path / "ledger"
    faulty(env={"FAULTY_LEDGER": str(ledger)})
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.allowed_tools = ["faulty__*"]
    profile.validator = ""
    profile.save()
    return {"profile": profile, "ledger": ledger}


def _ledger(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _approve(people: dict[str, Any], run: Run) -> None:
    for approval in Approval.objects.filter(run=run, status="pending"):
        actions.do_decide_approval(
            approval_id=approval.pk, user=people["approver"], decision="approve"
        )


def test_a_high_risk_server_tool_waits_for_a_person_then_runs_once(
    people, scripted, enqueued, mcp_profile
) -> None:
    transfer = call("faulty__transfer", account="ACME", amount=120)
    scripted.enqueue(transfer, "Moved.")
    run = actions.do_create_run(user=people["operator"], task="pay ACME")
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert _ledger(mcp_profile["ledger"]) == []  # nothing happened before the decision
    [approval] = Approval.objects.filter(run=run)
    assert (approval.tool, approval.risk) == ("faulty__transfer", "high")
    _approve(people, run)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert engine.execute_run(run.pk) is None  # nothing more to do
    [entry] = _ledger(mcp_profile["ledger"])
    assert entry["request_id"] == f"{run.pk}:{transfer.id}" == entry["idempotency_key"]
    assert entry["run_id"] == str(run.pk) and entry["arguments"]["amount"] == 120
    [execution] = ToolExecution.objects.filter(run=run)
    assert (execution.tool, execution.status) == ("faulty__transfer", "succeeded")
    started = RunEvent.objects.get(run=run, type="tool_call_started").data
    assert started["risk"] == "high" and started["approval"] == {"by": "person"}


def test_two_runs_whose_model_reuses_a_call_id_make_two_transfers(
    people, scripted, enqueued, mcp_profile
) -> None:
    """The key is scoped by the run: our faulty server answers a key it has seen from its
    ledger (as a payment API does), so with the bare call id the second run's transfer
    would be "replayed" and never made."""
    profile = mcp_profile["profile"]
    profile.risk_overrides = {"faulty__transfer": "low"}
    profile.save()
    runs = []
    for amount in (30, 45):
        same_id = ToolCall(id="call_0", name="faulty__transfer",
                           arguments={"account": "ACME", "amount": amount})  # fmt: skip
        scripted.enqueue(same_id, "Moved.")
        run = actions.do_create_run(user=people["operator"], task=f"pay ACME {amount}")
        assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
        runs.append(run)
    entries = _ledger(mcp_profile["ledger"])
    made = [(e["replayed"], e["arguments"]["amount"]) for e in entries]
    assert made == [(False, 30), (False, 45)]
    assert [e["idempotency_key"] for e in entries] == [f"{r.pk}:call_0" for r in runs]


def test_sum_per_totals_count_a_servers_tool_like_our_own(
    people, scripted, enqueued, mcp_profile
) -> None:
    profile = mcp_profile["profile"]
    profile.risk_overrides = {"faulty__transfer": "medium"}
    profile.approval_policies = {"faulty__transfer": RULE}
    profile.save()
    scripted.enqueue(
        call("faulty__transfer", account="ACME", amount=15),
        call("faulty__transfer", account="ACME", amount=10),  # 25 on ACME: a person
        "Done.",
    )
    run = actions.do_create_run(user=people["operator"], task="pay ACME twice")
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert [e["arguments"]["amount"] for e in _ledger(mcp_profile["ledger"])] == [15]
    [approval] = Approval.objects.filter(run=run, status="pending")
    assert approval.arguments["amount"] == 10
    requested = RunEvent.objects.get(run=run, type="approval_requested").data
    assert requested["why"] == "amount on account ACME reaches 20 (total 25.00)"
    _approve(people, run)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert [e["arguments"]["amount"] for e in _ledger(mcp_profile["ledger"])] == [15, 10]


def test_a_risk_override_makes_a_read_only_server_tool_ask(
    people, scripted, enqueued, mcp_profile
) -> None:
    profile = mcp_profile["profile"]
    profile.risk_overrides = {"faulty__echo": "high"}
    profile.save()
    scripted.enqueue(call("faulty__echo", text="hello"), "Said it.")
    run = actions.do_create_run(user=people["operator"], task="say hello")
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert Approval.objects.get(run=run).risk == "high"


def test_a_faulty_call_fails_with_words_and_the_run_goes_on(
    people, scripted, enqueued, mcp_profile
) -> None:
    scripted.enqueue(
        call("faulty__crash"),
        call("faulty__fail", message="no such account"),
        call("faulty__weather", city="Oslo"),
        "Reported.",
    )
    run = actions.do_create_run(user=people["operator"], task="check things")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    finished = [
        e.data for e in RunEvent.objects.filter(run=run, type="tool_call_finished").order_by("seq")
    ]
    assert [f["ok"] for f in finished] == [False, False, True]
    assert finished[0]["error"].startswith("MCP server 'faulty' closed the connection")
    assert finished[1]["error"] == "Error executing tool fail: no such account"
    assert finished[2]["result"] == {
        "city": "Oslo",
        "temperature": 21.5,
        "conditions": ["sunny", "dry"],
    }


def test_a_servers_image_is_stored_with_the_run_and_shown_in_its_timeline(
    people, scripted, enqueued, mcp_profile
) -> None:
    scripted.enqueue(call("faulty__picture"), "A red picture.")
    run = actions.do_create_run(user=people["operator"], task="show me")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    finished = RunEvent.objects.get(run=run, type="tool_call_finished").data
    assert finished["result"] == "a red picture"
    [image] = finished["images"]
    assert image["media_type"] == "image/png" and (image["width"], image["height"]) == (96, 64)
    client = Client()
    client.force_login(people["operator"])
    got = client.get(image["url"])
    assert got.status_code == 200 and got["Content-Type"] == "image/png"
    assert b"".join(got.streaming_content if got.streaming else [got.content]).startswith(
        b"\x89PNG"
    )
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'src="{image["url"]}"' in page
    # The model saw the image as an image part, after the tool's text.
    second = scripted.requests[1].messages
    assert any(getattr(m, "attachments", None) for m in second)
