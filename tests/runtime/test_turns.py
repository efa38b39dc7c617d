"""A turn's guards, through the path production takes (``Agent.step`` → ``Turns`` → the
``ApprovalGate``), and the moves a call of a turn may make. Each guard here was once left
alive by a mutation of its code; each test fails when that guard is taken out."""

from __future__ import annotations

import pytest

from agentweb.runtime import (
    Agent,
    AgentConfig,
    Finished,
    NeedsApproval,
    ToolMessage,
    ToolRegistry,
    tool,
)
from agentweb.runtime.state import TurnCall
from agentweb.runtime.testing import ScriptedModel, call

RAN: list[tuple[str, dict]] = []


@pytest.fixture(autouse=True)
def _reset():
    RAN.clear()


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    RAN.append(("lookup", {"key": key}))
    return f"value of {key}"


def _rule_that_breaks(args: dict) -> bool:
    raise RuntimeError("the rule's backend is down")


@tool(risk="medium", approval=_rule_that_breaks)
def pay(account: str, amount: float) -> str:
    """Pay an amount to an account."""
    RAN.append(("pay", {"account": account, "amount": amount}))
    return "paid"


@tool(risk="medium", approval=lambda args: args["amount"] >= 100)
def transfer(account: str, amount: float) -> str:
    """Move an amount to an account."""
    RAN.append(("transfer", {"account": account, "amount": amount}))
    return "moved"


def _agent(model, *tools_, **cfg):
    return Agent(model, ToolRegistry(tools_), AgentConfig(system_prompt="", **cfg))


def _drive(agent, state, **kw):
    it = agent.run(state, **kw)
    events = list(it)
    return events, it.outcome


# -- the duplicate-call guard within one turn -------------------------------------------------


def test_an_identical_call_twice_in_one_reply_runs_once_and_the_copy_is_told_so():
    first, second = call("lookup", key="A"), call("lookup", key="A")
    other = call("lookup", key="B")
    model = ScriptedModel([[first, second, other], "done"])
    agent = _agent(model, lookup)
    events, outcome = _drive(agent, agent.start("x"))
    assert outcome == Finished("done", "model")
    assert RAN == [("lookup", {"key": "A"}), ("lookup", {"key": "B"})]
    results = {m.call_id: m for m in model.requests[1].messages if isinstance(m, ToolMessage)}
    assert results[first.id].content == "value of A" and not results[first.id].is_error
    assert results[second.id].is_error
    assert results[second.id].content.startswith("Duplicate of an identical call")
    started = [e.data["call_id"] for e in events if e.type == "tool_call_started"]
    assert started == [first.id, other.id]  # the copy never started


# -- the approval predicate fails closed -------------------------------------------------------


def test_an_approval_rule_that_raises_puts_the_call_to_a_person():
    model = ScriptedModel([call("pay", account="X1", amount=5)])
    agent = _agent(model, pay)
    events, outcome = _drive(agent, agent.start("x"))
    assert isinstance(outcome, NeedsApproval)
    assert [(c.tool, c.reason) for c in outcome.calls] == [("pay", "policy")]
    asked = [e.data for e in events if e.type == "approval_requested"]
    assert asked[0]["why"] == "the rule of pay asks a person"
    assert RAN == []


def test_an_approval_rule_decides_both_ways_for_a_readable_call():
    model = ScriptedModel([call("transfer", account="X1", amount=5), "done"])
    agent = _agent(model, transfer)
    events, outcome = _drive(agent, agent.start("x"))
    assert outcome == Finished("done", "model") and RAN == [
        ("transfer", {"account": "X1", "amount": 5.0})
    ]
    started = next(e.data for e in events if e.type == "tool_call_started")
    assert started["approval"] == {
        "by": "policy",
        "reason": "the rule of transfer needs no person for this call",
    }
    model = ScriptedModel([call("transfer", account="X1", amount=500)])
    agent = _agent(model, transfer)
    _, outcome = _drive(agent, agent.start("x"))
    assert isinstance(outcome, NeedsApproval) and len(RAN) == 1


def test_a_high_risk_override_asks_a_person_whatever_the_tools_rule_says():
    model = ScriptedModel([call("transfer", account="X1", amount=5)])
    agent = _agent(model, transfer, risk_overrides={"transfer": "high"})
    _, outcome = _drive(agent, agent.start("x"))
    assert isinstance(outcome, NeedsApproval)
    assert [(c.risk, c.reason) for c in outcome.calls] == [("high", "high_risk")]
    assert RAN == []


def test_an_unreadable_profile_rule_puts_the_call_to_a_person():
    model = ScriptedModel([call("lookup", key="A")])
    agent = _agent(model, lookup, approval_policies={"lookup": {"argument": "key"}})
    events, outcome = _drive(agent, agent.start("x"))
    assert isinstance(outcome, NeedsApproval) and RAN == []
    asked = next(e.data for e in events if e.type == "approval_requested")
    assert asked["why"] == "the profile's rule for lookup is unreadable"


# -- previews stop after a failing on_delta ----------------------------------------------------


def test_a_failing_preview_callback_is_not_called_again_during_that_model_call():
    seen: list[str] = []

    def on_delta(text: str) -> None:
        seen.append(text)
        raise ConnectionError("the channel layer is down")

    first = "A streamed reply long enough for several preview pieces."
    model = ScriptedModel([first])
    assert len(model.delta_pieces(first)) > 2
    agent = _agent(model, lookup, stream=True)
    _, outcome = _drive(agent, agent.start("x"), on_delta=on_delta)
    assert outcome == Finished(first, "model")
    assert seen == [model.delta_pieces(first)[0]]


def test_the_next_model_call_gets_previews_again_after_one_failed():
    seen: list[str] = []
    fail = [True]

    def on_delta(text: str) -> None:
        seen.append(text)
        if fail[0]:
            fail[0] = False
            raise ConnectionError("a hiccup")

    model = ScriptedModel(["x" * 40, "y" * 40])
    agent = Agent(
        model,
        ToolRegistry([lookup]),
        AgentConfig(system_prompt="", stream=True),
        validator=lambda answer, state: "try again" if answer.startswith("x") else None,
    )
    _, outcome = _drive(agent, agent.start("x"), on_delta=on_delta)
    assert outcome == Finished("y" * 40, "validator")
    assert seen == ["x" * 16, *model.delta_pieces("y" * 40)]


# -- a call's moves ----------------------------------------------------------------------------


def test_a_call_moves_only_along_its_transitions():
    c = TurnCall(call_id="c1", name="t")
    c.ask("high_risk")
    assert c.undecided and c.announce() and not c.announce()
    with pytest.raises(RuntimeError):
        c.release()  # not approved yet
    c.decide(True, "ok", {"a": 1})
    assert (c.decision, c.edited, c.arguments) == ("approved", True, {"a": 1})
    with pytest.raises(RuntimeError):
        c.decide(False, "no", None)  # decided already
    c.release()
    assert c.state == "queued"
    c.suspend(["child-1"])
    with pytest.raises(RuntimeError):
        c.resolve("early", False)  # a waiting call is woken first
    c.wake()
    assert c.waiting_on == ["child-1"]  # so it is not announced twice
    c.resolve("result", False)
    assert (c.state, c.content, c.waiting_on) == ("done", "result", None)
    for move in (lambda: c.refuse("x"), lambda: c.ask("policy"), c.wake):
        with pytest.raises(RuntimeError):
            move()


def test_a_call_asked_again_is_undecided_and_announced_anew():
    c = TurnCall(call_id="c1", name="t")
    c.ask("policy", why="a total reached 20")
    c.announce()
    c.decide(True, "", None)
    c.release()
    c.ask("unknown_outcome")  # the journal says it started and never finished
    assert c.undecided and not c.announced and c.reason == "unknown_outcome"
    assert c.policy_reason == "a total reached 20" and c.comment == ""
