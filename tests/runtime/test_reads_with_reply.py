"""Quick reads run in the step of the reply that asked for them (``Turns.reads_now``):
one step stores the reply and its results. Anything that may change something, a read
not yet seen to be quick here, or a slow one keeps the step of its own, stored before it
runs."""

from __future__ import annotations

import time

import pytest

from agentweb.runtime import Agent, AgentConfig, Finished, ToolRegistry, execution, tool
from agentweb.runtime.testing import ScriptedModel, call

RAN: list[str] = []
DELAY = [0.0]


@pytest.fixture(autouse=True)
def _reset():
    RAN.clear()
    DELAY[0] = 0.0
    for t in (find, find_too, summed, idem):
        t._last_ms = None


@tool(read_only=True)
def find(key: str) -> str:
    """Look a key up."""
    RAN.append(f"find {key}")
    time.sleep(DELAY[0])
    return f"value of {key}"


@tool(read_only=True)
def find_too(key: str) -> str:
    """Look another key up."""
    RAN.append(f"find_too {key}")
    return f"other value of {key}"


@tool(read_only=True)
def summed(order_id: str, amount: float) -> str:
    """A read a policy totals."""
    RAN.append("summed")
    return "ok"


@tool  # low risk and idempotent, but not declared read-only: it may change something
def idem(key: str) -> str:
    """Mark a key as seen."""
    RAN.append(f"idem {key}")
    return "marked"


@tool(risk="medium", read_only=True)  # read_only is ignored above low risk
def noted(key: str) -> str:
    """Note a key."""
    RAN.append(f"noted {key}")
    return "noted"


def _agent(model, **cfg):
    tools = ToolRegistry([find, find_too, summed, idem, noted])
    return Agent(model, tools, AgentConfig(system_prompt="", **cfg))


def _steps(agent, task="go"):
    """Every step's event types until the run ends, and the outcome."""
    state = agent.start(task)
    steps = []
    while True:
        result = agent.step(state)
        steps.append([e.type for e in result.events])
        if result.outcome is not None:
            return steps, result.outcome


def _warm(*tools_):
    for t in tools_:
        t._last_ms = 0.5  # called here before, quickly


REPLY = ["run_started", "model_called"]
CALL = ["tool_call_started", "tool_call_finished"]
ANSWER = ["model_called", "run_finished"]


def test_quick_reads_run_in_the_step_of_their_reply():
    _warm(find, find_too)
    model = ScriptedModel([[call("find", key="a"), call("find_too", key="b")], "Done."])
    steps, outcome = _steps(_agent(model))
    both = ["tool_call_started"] * 2 + ["tool_call_finished"] * 2
    assert steps == [REPLY + both, ANSWER]
    assert isinstance(outcome, Finished) and RAN == ["find a", "find_too b"]


def test_a_read_not_called_here_before_waits_for_its_reply_to_be_stored():
    model = ScriptedModel([call("find", key="a"), call("find", key="b"), "Done."])
    steps, _ = _steps(_agent(model))
    # the first call has no record yet: a step of its own; it was quick, so the next runs now
    assert steps == [REPLY, CALL, ["model_called"] + CALL, ANSWER]


def test_a_slow_read_keeps_a_step_of_its_own(monkeypatch):
    monkeypatch.setattr(execution, "WITH_REPLY_MS", 20.0)
    _warm(find)
    DELAY[0] = 0.05
    model = ScriptedModel([call("find", key="a"), call("find", key="b"), "Done."])
    steps, _ = _steps(_agent(model))
    assert steps == [REPLY + CALL, ["model_called"], CALL, ANSWER]
    assert RAN == ["find a", "find b"]


@pytest.mark.parametrize(
    ("calls", "config"),
    [
        pytest.param([call("idem", key="a")], {}, id="not-declared-read-only"),
        pytest.param([call("noted", key="a")], {}, id="medium-risk"),
        pytest.param(
            [call("find", key="a")], {"risk_overrides": {"find": "medium"}}, id="override"
        ),
        pytest.param([call("find", key="a"), call("idem", key="b")], {}, id="mixed-turn"),
        pytest.param(
            [call("summed", order_id="A1", amount=5)],
            {
                "approval_policies": {
                    "summed": {"argument": "amount", "at_least": 100, "sum_per": "order_id"}
                }
            },
            id="counted-by-a-total",
        ),
    ],
)
def test_anything_but_quick_reads_runs_only_after_its_reply_is_stored(calls, config):
    _warm(find, find_too, summed, idem, noted)
    model = ScriptedModel([calls, "Done."])
    steps, outcome = _steps(_agent(model, **config))
    assert steps[0] == REPLY  # the reply alone: nothing ran before it could be stored
    assert RAN == [] or steps[1][0] == "tool_call_started"
    assert isinstance(outcome, Finished)
