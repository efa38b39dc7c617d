"""sum_per totals are counted again when a call is recorded (no database): a total that
grew between the reply's planning and the call's execution sends the call to a person."""

from __future__ import annotations

from typing import Any

from agentweb.runtime import (
    Admission,
    Agent,
    AgentConfig,
    Declined,
    InMemoryJournal,
    NeedsApproval,
    PriorExecution,
    ToolRegistry,
    tool,
)
from agentweb.runtime.approvals import group_key
from agentweb.runtime.testing import ScriptedModel, call

RULE = {"argument": "amount", "at_least": 20, "sum_per": "order_id"}
PAID: list[float] = []


@tool(risk="high")
def pay_out(order_id: str, amount: float) -> dict[str, Any]:
    """Pay money back."""
    PAID.append(amount)
    return {"paid_out": amount}


class Ledger(InMemoryJournal):
    """A journal whose records are also what the host's ``prior_total`` adds up, as the
    Django side's rows are; ``elsewhere`` stands for calls other runs recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, float]] = []

    def begin(self, call_id: str, tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
        prior = super().begin(call_id, tool, arguments, **kw)
        if prior is None:
            self.rows.append((arguments["order_id"], arguments["amount"]))
        return prior

    def elsewhere(self, order_id: str, amount: float) -> None:
        self.rows.append((order_id, amount))

    def prior_total(self, tool: str, argument: str, sum_per: str, value: Any) -> float:
        return sum(a for o, a in self.rows if group_key(o) == group_key(value))


def planned(*calls: Any) -> tuple[Agent, Ledger, Any]:
    PAID.clear()
    ledger = Ledger()
    model = ScriptedModel([list(calls), "Done."])
    config = AgentConfig(system_prompt="", approval_policies={"pay_out": RULE})
    agent = Agent(
        model, ToolRegistry([pay_out]), config, journal=ledger, prior_total=ledger.prior_total
    )
    state = agent.start("Refund A1")
    step = agent.step(state)  # the reply, planned; nothing runs yet
    assert step.outcome is None and [c.state for c in state.turn or ()] == ["queued"] * len(calls)
    return agent, ledger, state


def test_it_asks_a_person_when_the_total_grew_since_the_reply_was_planned() -> None:
    agent, ledger, state = planned(
        call("pay_out", order_id="A1", amount=15), call("pay_out", order_id="A1", amount=3)
    )
    ledger.elsewhere("a1", 10)  # another run paid meanwhile
    step = agent.step(state)
    assert isinstance(step.outcome, NeedsApproval) and PAID == []
    # the 15 reaches 20 now; the 3 after it counts the 15 that waits for a person
    assert [e.data["why"] for e in step.events if e.type == "approval_requested"] == [
        "amount on order_id A1 reaches 20 (total 25.00)",
        "amount on order_id A1 reaches 20 (total 28.00)",
    ]
    assert [c.reason for c in step.outcome.calls] == ["policy", "policy"]


def test_an_admitted_call_says_the_total_it_was_recorded_with() -> None:
    agent, ledger, state = planned(call("pay_out", order_id="A1", amount=15))
    ledger.elsewhere("A1", 4)
    step = agent.step(state)
    assert PAID == [15]
    [started] = [e for e in step.events if e.type == "tool_call_started"]
    assert started.data["approval"] == {
        "by": "policy",
        "reason": "amount below 20 on order_id A1 (total 19.00)",
    }


def test_a_declined_admission_records_nothing_and_a_known_call_is_not_checked() -> None:
    journal = InMemoryJournal()
    checked: list[str] = []

    def no() -> str:
        checked.append("no")
        return "a person decides"

    admission = Admission(keys=("k",), check=no)
    assert journal.begin("c1", "pay_out", {}, admission=admission) == Declined("a person decides")
    assert journal.begin("c1", "pay_out", {}) is None  # nothing was recorded by the refusal
    assert journal.begin("c1", "pay_out", {}, admission=admission) == PriorExecution("started")
    assert checked == ["no"]
