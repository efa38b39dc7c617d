"""A tool that cannot answer yet suspends the run (NeedsSubtasks); the next step asks it
again with the same call id, and the model sees one result per call."""

from __future__ import annotations

import json

from agentweb.runtime import (
    Agent,
    AgentConfig,
    Decision,
    Finished,
    LoopState,
    NeedsApproval,
    NeedsSubtasks,
    Suspend,
    ToolContext,
    ToolMessage,
    ToolRegistry,
    tool,
)
from agentweb.runtime.testing import ScriptedModel, call

READY: dict[str, str] = {}
ASKED: list[str] = []


@tool
def wait_for(keys: list[str], ctx: ToolContext) -> list[str]:
    """Wait until every key has a value.

    Args:
        keys: What to wait for.
    """
    ASKED.append(ctx.call_id)
    missing = [k for k in keys if k not in READY]
    if missing:
        raise Suspend(missing)
    return [READY[k] for k in keys]


@tool(risk="high")
def send(text: str) -> str:
    """Send a message."""
    return f"sent {text}"


def _agent(model: ScriptedModel) -> Agent:
    return Agent(model, ToolRegistry([wait_for, send]), AgentConfig(system_prompt="s"))


def test_it_suspends_and_runs_the_same_call_again_when_woken() -> None:
    READY.clear()
    ASKED.clear()
    model = ScriptedModel()
    waiting = call("wait_for", keys=["a", "b"])
    model.enqueue(waiting, "done: x, y")
    agent = _agent(model)
    state = agent.start("task")
    reply = agent.step(state)  # the reply is stored before its calls run
    assert reply.outcome is None
    assert [e.type for e in reply.events] == ["run_started", "model_called"]
    first = agent.step(state)
    assert isinstance(first.outcome, NeedsSubtasks)
    assert first.outcome.calls == [waiting.id]
    assert first.outcome.waiting_on == ["a", "b"]
    assert [e.type for e in first.events] == ["tool_call_started"]
    # The pause survives a JSON round trip (another process resumes it).
    state = LoopState.from_json(json.loads(json.dumps(state.to_json())))
    assert state.status == "waiting_subtasks"
    READY["a"] = "x"
    again = agent.step(state)  # woken too early: still waiting, no model call, no new event
    assert isinstance(again.outcome, NeedsSubtasks)
    assert again.outcome.waiting_on == ["b"]
    assert again.events == []
    assert len(model.requests) == 1
    READY["b"] = "y"
    woken = agent.step(state)
    assert woken.outcome is None
    assert [e.type for e in woken.events] == ["tool_call_finished"]
    last = agent.step(state)
    assert isinstance(last.outcome, Finished)
    assert [e.type for e in last.events] == ["model_called", "run_finished"]
    assert woken.events[0].data["result"] == ["x", "y"]
    assert ASKED.count(waiting.id) == len(ASKED) == 3  # one call id throughout
    results = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [(r.call_id, json.loads(r.content)) for r in results] == [(waiting.id, ["x", "y"])]
    model.assert_complete()


def test_it_asks_for_approval_first_and_waits_after_the_decision() -> None:
    READY.clear()
    model = ScriptedModel()
    risky, waiting = call("send", text="hi"), call("wait_for", keys=["k"])
    model.enqueue([risky, waiting], "all done")
    agent = _agent(model)
    state = agent.start("task")
    assert agent.step(state).outcome is None  # the reply, stored before anything runs
    first = agent.step(state)
    assert isinstance(first.outcome, NeedsApproval)
    agent.decide(state, [Decision(call_id=risky.id, approved=True)])
    second = agent.step(state)
    assert isinstance(second.outcome, NeedsSubtasks)
    assert [e.data["tool"] for e in second.events if e.type == "tool_call_finished"] == ["send"]
    READY["k"] = "v"
    assert agent.step(state).outcome is None  # the turn closes
    assert isinstance(agent.step(state).outcome, Finished)
    results = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [r.call_id for r in results] == [risky.id, waiting.id]
