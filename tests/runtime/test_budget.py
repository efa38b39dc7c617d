"""A host's budget check before every model call (``Agent(budget=...)``): the run fails
naming the budget and makes no further model call."""

from __future__ import annotations

from agentweb.runtime import (
    Agent,
    AgentConfig,
    BudgetExceeded,
    Failed,
    LoopState,
    ToolRegistry,
    tool,
)
from agentweb.runtime.events import parse
from agentweb.runtime.gateway import ModelTimeout
from agentweb.runtime.testing import ScriptedModel, call


@tool
def look(thing: str) -> str:
    """Look at a thing."""
    return f"{thing} looks fine"


def agent(model: ScriptedModel, budget=None) -> Agent:  # type: ignore[no-untyped-def]
    return Agent(model, ToolRegistry([look]), AgentConfig(system_prompt="You look."), budget=budget)


def drive(a: Agent, task: str = "look around") -> tuple[LoopState, list, object]:
    state = a.start(task)
    events: list = []
    while True:
        result = a.step(state)
        events += result.events
        if result.outcome is not None:
            return state, events, result.outcome


def test_it_asks_before_every_model_call_and_stops_when_told() -> None:
    asked: list[int] = []

    def budget(state: LoopState) -> BudgetExceeded | None:
        asked.append(state.iteration)
        if state.iteration >= 2:  # two model calls made
            return BudgetExceeded("run_tokens", "budget exhausted: 20 tokens per run")
        return None

    model = ScriptedModel([call("look", thing="a"), call("look", thing="b"), "All fine."])
    a = agent(model, budget)
    state, events, outcome = drive(a)
    assert asked == [0, 1, 2]
    assert isinstance(outcome, Failed) and outcome.reason == "budget exhausted: 20 tokens per run"
    failed = events[-1]
    assert failed.type == "run_failed" and failed.to_json()["data"] == {
        "reason": "budget exhausted: 20 tokens per run",
        "budget": "run_tokens",
    }
    assert parse("run_failed", failed.to_json()["data"]).budget == "run_tokens"
    assert state.status == "failed" and state.failure_reason == outcome.reason
    calls = sum(1 for e in events if e.type == "model_called")
    assert calls == 2 and model.remaining == 1  # the refused third call was never made
    # The tools of the last reply still ran before the refused call.
    assert events[-2].type == "tool_call_finished"


def test_without_a_check_or_under_it_nothing_changes() -> None:
    for budget in (None, lambda state: None):
        model = ScriptedModel([call("look", thing="a"), "All fine."])
        _, events, outcome = drive(agent(model, budget))
        assert not isinstance(outcome, Failed) and model.remaining == 0
        assert [e.type for e in events][-1] == "run_finished"


def test_a_plain_failure_keeps_its_stored_shape() -> None:
    model = ScriptedModel([ModelTimeout("the provider took too long")])  # a model error
    _, events, outcome = drive(agent(model))
    assert isinstance(outcome, Failed)
    assert set(events[-1].to_json()["data"]) == {"reason"}
