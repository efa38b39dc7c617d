"""Every event is one class of the ``Event`` union; its stored JSON is byte for byte what
the events shipped before the classes stored (``event_samples.jsonl``, written by the
builders of 6edb515), a stored event parses back to the same event, and what the loop
yields fits its shape and survives a JSON round trip unchanged."""

from __future__ import annotations

import json
from pathlib import Path

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
        stored = json.loads(json.dumps(event.to_json()))
        assert stored == event.to_json()
        assert ev.parse(stored["type"], stored["data"]) == event


STORED = (Path(__file__).parent / "event_samples.jsonl").read_text().splitlines()

#: What the runtime and the host build now, in the order of ``event_samples.jsonl``.
IMAGE = {"ref": "abc", "url": "memory:abc", "media_type": "image/png", "size": 10}
BUILT: list[ev.Event] = [
    ev.RunStarted(
        task="Pay 5", model="openai:x", scripted=False, tools=["lookup", "pay"], max_iterations=20
    ),
    ev.ModelCalled(
        model="m", latency_ms=12.5, tokens={"input": 120, "output": 30}, text="",
        tool_calls=[], finish_reason=None, iteration=1,
    ),
    ev.ModelCalled(
        model="m", latency_ms=812.4, tokens={"input": 120, "output": 30},
        text="Let me look <b>x</b> é",
        tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"key": "A7"}, "cut_off": True}],
        finish_reason="length", iteration=3, cut_off=True, truncated=True, reasoning="think",
        context={"budget": 8000, "tools": ["lookup"]},
    ),
    ev.ModelCalled(
        model="m", latency_ms=1.0, tokens={"input": 1, "output": 2}, text="t", tool_calls=[],
        finish_reason="stop", iteration=2, cost_usd=0.00042,
    ),
    ev.ModelCalled(
        model="m", latency_ms=1.0, tokens={"input": 1, "output": 2}, text="t", tool_calls=[],
        finish_reason="stop", iteration=2, cost_usd=None,
    ),
    ev.ToolCallStarted(call_id="c1", tool="lookup", arguments={"key": "A7"}, risk="low"),
    ev.ToolCallStarted(
        call_id="c2", tool="pay", arguments={"amount": 5}, risk="high",
        approval={"by": "policy", "reason": "amount 5.00 below 20"},
        repaired={"Amount": "amount"}, reused=True,
    ),
    ev.ToolCallFinished(
        call_id="c1", tool="lookup", ok=True, result={"value": [1, 2]}, error=None,
        duration_ms=0.042,
    ),
    ev.ToolCallFinished(
        call_id="c3", tool="shot", ok=True, result="x" * 10, error=None, duration_ms=5.0,
        truncated=True, reused=True, images=[{**IMAGE, "width": 1, "height": 1}],
        image_notes=["only the first 4 images were kept"],
    ),
    ev.ToolCallFinished(
        call_id="c4", tool="pay", ok=False, result=None, error="Error: RuntimeError: down",
        duration_ms=3.0,
    ),
    ev.ApprovalRequested(
        call_id="c2", tool="pay", arguments={"amount": 50}, risk="high", reason="policy",
        why="amount on account A reaches 20 (total 50.00)",
    ),
    ev.ApprovalRequested(call_id="c2", tool="pay", arguments={}, risk="high", reason=None),
    ev.ApprovalRequested(call_id="c2", tool="pay", arguments={}, risk="high", reason=""),
    ev.ApprovalDecided(call_id="c2", decision="approved", comment="", arguments={"amount": 5}),
    ev.ApprovalDecided(call_id="c2", decision="rejected", comment="no", arguments=None),
    ev.ApprovalDecided(
        call_id="c2", tool="pay", decision="approved", comment="ok", arguments={"amount": 4},
        edited=True, by="ann",
    ),
    ev.ApprovalDecided(
        call_id="c2", tool="pay", decision="expired", comment="", arguments={}, by=None
    ),
    ev.ContextCompacted(
        tokens_before=9000, tokens_after=3000, budget=4000, actions=["digested", "evicted"],
        done={"digested": ["c1"], "evicted": {"from": 2, "to": 9}}, window_start=4,
    ),
    ev.ContextCompacted(tokens_before=10, tokens_after=5, budget=8, actions=[], window_start=0),
    ev.RunFinished(
        final_answer="Done.", decided_by="model", usage={"input_tokens": 3, "output_tokens": 4}
    ),
    ev.RunFinished(
        final_answer="Best so far", decided_by="bounds", usage={},
        reason="reached the limit of 20 iterations", truncated=True,
    ),
    ev.RunFailed(reason="model error: boom"),
    ev.RunCancelled(),
    ev.RunCancelled(iteration=3),
    ev.RunCancelled(by="request"),
    ev.SubtaskStarted(task_id=7, agent="billing", task="Check it"),
    ev.SubtaskFinished(task_id=7, status="succeeded", result=""),
    ev.SubtaskFinished(task_id=7, status="succeeded", result="x", truncated=True),
    ev.SubtaskFinished(task_id=8, status="failed", error="the task was cancelled"),
    ev.CompletionObjected(validator="claims.check", reason="unfounded"),
    ev.ApprovalGiven(call_id="c9", tool="pay", by="ann", given=1, needed=2, edited=True),
]  # fmt: skip


def test_the_samples_cover_every_event_type():
    assert {json.loads(line)["type"] for line in STORED} == ev.EVENT_TYPES == set(ev.CLASSES)
    assert len(BUILT) == len(STORED)


@pytest.mark.parametrize("n", range(len(STORED)))
def test_an_event_is_stored_byte_for_byte_as_before_and_parses_back(n):
    line, event = STORED[n], BUILT[n]
    assert json.dumps(event.to_json(), ensure_ascii=False) == line  # key order included
    stored = json.loads(line)
    parsed = ev.parse(stored["type"], stored["data"])
    assert parsed == event and type(parsed) is type(event)
    assert json.dumps(parsed.to_json(), ensure_ascii=False) == line


def test_parsing_refuses_data_that_does_not_fit():
    with pytest.raises(ev.EventShapeError, match="missing 'reason'"):
        ev.parse("run_failed", {})
    with pytest.raises(ev.EventShapeError, match="unknown 'reasn'"):
        ev.parse("run_failed", {"reason": "x", "reasn": "x"})
    with pytest.raises(ev.EventShapeError, match="unknown event type"):
        ev.parse("run_exploded", {})


@pytest.mark.parametrize("n", range(len(STORED)))
def test_the_tolerant_reader_gives_a_fitting_row_as_parse_does(n):
    stored = json.loads(STORED[n])
    assert ev.read(stored["type"], stored["data"]) == BUILT[n]


def test_the_tolerant_reader_keeps_an_older_or_partial_row_as_its_class():
    # a model_called of an older shape (no finish_reason/iteration), with a key it never had
    row = {"model": "m", "latency_ms": 120, "tokens": {"input": 3}, "text": "hi", "old": 1}
    with pytest.raises(ev.EventShapeError):
        ev.parse("model_called", row)
    event = ev.read("model_called", row)
    assert isinstance(event, ev.ModelCalled)
    assert (event.latency_ms, event.text, event.tool_calls, event.finish_reason) == (
        120, "hi", None, None,
    )  # fmt: skip
    assert event.cost_usd is ev.UNSET  # an optional key absent reads as its default
    assert isinstance(ev.read("tool_call_finished", "not a dict"), ev.ToolCallFinished)
    assert ev.read("run_exploded", {}) is None
    done = ev.read("context_compacted", {"actions": ["drop", 5], "drop": [1], "x": 2})
    assert isinstance(done, ev.ContextCompacted) and done.done == {"drop": [1]}


def test_readers_match_on_the_classes():
    def cost(event: ev.Event) -> float:
        match event:
            case ev.ModelCalled(cost_usd=float(usd)):
                return usd
            case ev.ToolCallFinished(ok=False):
                return -1.0
        return 0.0

    assert [cost(e) for e in BUILT[1:5]] == [0.0, 0.0, 0.00042, 0.0]
    assert cost(BUILT[9]) == -1.0 and BUILT[4].cost is None and BUILT[3].cost == 0.00042


def test_the_check_finds_a_typo_and_a_missing_key():
    assert ev.misfit("run_failed", {"reason": "x"}) == []
    assert ev.misfit("run_failed", {"reasn": "x"}) == ["missing 'reason'", "unknown 'reasn'"]
    assert ev.misfit("run_exploded", {}) == ["unknown event type 'run_exploded'"]
    compacted = ev.ContextCompacted(
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
