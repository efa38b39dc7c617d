"""Every event has one shape (a TypedDict) and one builder; what the loop yields fits its
shape and survives a JSON round trip unchanged."""

from __future__ import annotations

import json

import pytest

from agentweb.runtime import Agent, AgentConfig, Decision, ToolContext, ToolRegistry, tool
from agentweb.runtime import events as ev
from agentweb.runtime.gateway import ModelAuthError
from agentweb.runtime.testing import ScriptedModel, call


@tool
def lookup(key: str) -> dict:
    """Look something up."""
    return {"key": key, "value": "x" * 40}


@tool(risk="high")
def pay(amount: float, ctx: ToolContext) -> dict:
    """Pay money."""
    return {"paid": amount}


REGISTRY = ToolRegistry([lookup, pay])


def _until_outcome(agent: Agent, state, seen: list[ev.Event]):
    while True:
        step = agent.step(state)
        seen += step.events
        if step.outcome is not None:
            return step.outcome


def _check(events: list[ev.Event]) -> None:
    for event in events:
        assert ev.misfit(event.type, event.data) == [], (event.type, event.data)
        assert json.loads(json.dumps(event.to_json())) == event.to_json()


def test_it_has_a_shape_for_every_event_type():
    assert set(ev.DATA) == ev.EVENT_TYPES


def test_the_check_finds_a_typo_and_a_missing_key():
    assert ev.misfit("run_failed", {"reason": "x"}) == []
    assert ev.misfit("run_failed", {"reasn": "x"}) == ["missing 'reason'", "unknown 'reasn'"]
    assert ev.misfit("run_exploded", {}) == ["unknown event type 'run_exploded'"]
    compacted = ev.context_compacted(
        tokens_before=10, tokens_after=5, budget=8, done={"digested": ["c1"]},
        actions=["digested"], window_start=0,
    ).data  # fmt: skip
    assert ev.misfit("context_compacted", compacted) == []
    assert ev.misfit("context_compacted", {**compacted, "evicted": 3}) == ["unknown 'evicted'"]


def test_a_run_through_approval_yields_only_fitting_events():
    model = ScriptedModel(
        [
            [call("lookup", key="a"), call("pay", amount=5)],
            "Paid 5.",
        ]
    )
    agent = Agent(model, REGISTRY, AgentConfig(system_prompt="s"))
    state = agent.start("Pay 5")
    seen: list[ev.Event] = []
    _until_outcome(agent, state, seen)
    assert [e.type for e in seen][-1] == "approval_requested"
    (pending,) = state.pending_approvals
    seen += agent.decide(state, [Decision(call_id=pending.call_id, approved=True)])
    _until_outcome(agent, state, seen)
    assert {e.type for e in seen} >= {
        "run_started", "model_called", "tool_call_started", "tool_call_finished",
        "approval_requested", "approval_decided", "run_finished",
    }  # fmt: skip
    _check(seen)


def test_objections_failures_and_cancels_fit():
    model = ScriptedModel(["I paid.", "Nothing was paid."])
    agent = Agent(
        model, REGISTRY, AgentConfig(system_prompt="s"),
        validator=lambda answer, state: "prove it" if answer == "I paid." else None,
    )  # fmt: skip
    state = agent.start("Pay")
    events: list[ev.Event] = []
    _until_outcome(agent, state, events)
    assert "completion_objected" in [e.type for e in events]
    _check(events)
    failing = Agent(
        ScriptedModel([ModelAuthError("fake", 401)]), REGISTRY, AgentConfig(system_prompt="s")
    )
    state = failing.start("x")
    events = []
    _until_outcome(failing, state, events)
    assert events[-1].type == "run_failed"
    _check(events)
    state = agent.start("y")
    _check(agent.cancel(state))


@pytest.mark.parametrize(
    "event",
    [
        # what the host stores: its approval records, cancels, failures and delegation
        ev.approval_decided(
            call_id="c1",
            tool="pay",
            decision="approved",
            comment="",
            arguments={"amount": 5},
            edited=True,
            by="ann",
        ),
        ev.approval_decided(
            call_id="c1", tool="pay", decision="expired", comment="late", arguments={}, by=None
        ),
        ev.approval_requested(call_id="c1", tool="pay", arguments={}, risk="high", reason=""),
        ev.run_cancelled(by="request"),
        ev.run_failed(reason="internal error"),
        ev.subtask_started(task_id=3, agent="billing", task="Check the charge"),
        ev.subtask_finished({"task_id": 3, "status": "failed", "error": "the task failed"}),
    ],  # fmt: skip
    ids=lambda e: e.type,
)
def test_the_hosts_events_fit(event):
    _check([event])


def test_the_hosts_decision_names_the_decider_and_the_runtimes_does_not():
    host = ev.approval_decided(
        call_id="c1", tool="pay", decision="expired", comment="", arguments={}, by=None
    )
    assert host.data["by"] is None and host.data["edited"] is False and host.data["tool"] == "pay"
    runtime = ev.approval_decided(call_id="c1", decision="rejected", comment="", arguments=None)
    assert set(runtime.data) == {"call_id", "decision", "comment", "arguments"}
