"""The IT helpdesk example on the runtime alone (no database): its tools, its scripted
model, its validator, and that it uses only the public integration surface."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from agentweb.runtime import (
    Agent,
    AgentConfig,
    Decision,
    Finished,
    NeedsApproval,
    ToolMessage,
    load_tools,
)
from agentweb.runtime.testing import ScriptedModel, call
from examples.helpdesk import checks, directory
from examples.helpdesk.tools import demo_model

ROOT = Path(__file__).resolve().parents[2]
HELPDESK = ROOT / "examples" / "helpdesk"
TOOLS = load_tools(["examples.helpdesk.tools"])


@pytest.fixture(autouse=True)
def fresh_directory() -> None:
    directory.reset()


def play(task: str, approve: bool | None = True, comment: str = "") -> tuple[Any, list[Any]]:
    agent = Agent(
        demo_model(), TOOLS, AgentConfig(system_prompt="helpdesk"), validator=checks.claims_done
    )
    state = agent.start(task, context={"run_id": "t1"})
    events: list[Any] = []
    for _ in range(15):
        result = agent.step(state)
        events += result.events
        if isinstance(result.outcome, NeedsApproval):
            assert approve is not None, "no approval expected"
            events += agent.decide(
                state,
                [Decision(call_id=p.call_id, approved=approve, comment=comment)
                 for p in result.outcome.calls],
            )  # fmt: skip
            continue
        if result.outcome is not None:
            return result.outcome, events
    raise AssertionError("did not finish")


def test_it_imports_only_the_public_integration_surface():
    allowed = ("agentweb.runtime", "examples.helpdesk", "__future__")
    offenders = []
    for path in HELPDESK.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                internal = name.startswith("agentweb") and name != "agentweb.runtime"
                other = internal or name.split(".")[0] in ("django", "tools")
                if other and not name.startswith(allowed):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_a_password_reset_waits_for_approval_then_runs_once():
    outcome, events = play("Hi, this is a.kim, I forgot my password")
    assert isinstance(outcome, Finished) and outcome.decided_by == "validator"
    assert "a one-time link went to alex.kim@example.com" in outcome.answer
    requested = [e.data["tool"] for e in events if e.type == "approval_requested"]
    assert requested == ["reset_password"]
    assert directory.DIRECTORY.accounts["a.kim"]["locked"] is False


def test_a_rejected_paid_licence_is_not_assigned():
    outcome, _ = play("Please give b.osei a figma licence", approve=False, comment="no budget")
    assert "rejected assign_licence (no budget)" in outcome.answer
    assert "figma" not in directory.DIRECTORY.accounts["b.osei"]["licences"]


def test_a_free_licence_needs_no_approval():
    directory.DIRECTORY.accounts["b.osei"]["licences"].remove("zoom")
    outcome, events = play("b.osei needs a zoom license", approve=None)
    assert "Assigned a zoom licence to b.osei" in outcome.answer
    assert not [e for e in events if e.type == "approval_requested"]


def test_an_unlock_and_a_hardware_ticket_run_without_a_person():
    outcome, _ = play("a.kim is locked out and cannot sign in", approve=None)
    assert outcome.answer == "Unlocked a.kim; they can sign in again."
    outcome, _ = play("The screen of b.osei's laptop LT-2042 is broken", approve=None)
    assert "Repair ticket HW-101 opened for LT-2042" in outcome.answer


def test_a_refusal_reaches_the_model_word_for_word():
    model = ScriptedModel([call("get_account", username="jdoe"), "ok"])
    agent = Agent(model, TOOLS, AgentConfig(system_prompt=""))
    list(agent.run(agent.start("who is jdoe")))
    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolMessage) and result.is_error
    assert result.content.startswith("No account 'jdoe'. Usernames look like 'a.kim'")


def test_the_validator_sends_back_a_claim_no_tool_confirmed():
    model = ScriptedModel(["Done: the password was reset.", "Nothing was changed yet."])
    agent = Agent(model, TOOLS, AgentConfig(system_prompt=""), validator=checks.claims_done)
    events = list(agent.run(agent.start("reset a.kim")))
    objections = [e.data for e in events if e.type == "completion_objected"]
    assert len(objections) == 1 and "reset_password" in objections[0]["reason"]
    assert objections[0]["validator"] == "examples.helpdesk.checks.claims_done"


def test_seven_parameters_are_fine():
    create = TOOLS.get("create_account")
    assert create is not None and len(create.params) == 7
    assert create.risk == "high"
