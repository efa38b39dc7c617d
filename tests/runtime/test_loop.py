"""The guarded loop, driven by the scripted model (no network, no database)."""

import json
import threading
import time

import pytest

from agentweb.runtime import (
    Agent,
    AgentConfig,
    AssistantMessage,
    Cancelled,
    Decision,
    Failed,
    Finished,
    LoopState,
    NeedsApproval,
    PriorExecution,
    ToolArgumentError,
    ToolContext,
    ToolError,
    ToolMessage,
    ToolRegistry,
    UserMessage,
    tool,
)
from agentweb.runtime.context import ContextPolicy, PreparedContext
from agentweb.runtime.events import EVENT_TYPES, ContextCompacted
from agentweb.runtime.gateway import ModelTimeout
from agentweb.runtime.loop import InMemoryJournal
from agentweb.runtime.testing import ScriptedModel, call

CALLS: list[tuple[str, dict]] = []
_lock = threading.Lock()


def _record(name, **kw):
    with _lock:
        CALLS.append((name, kw))


@tool
def get_order(order_id: str) -> dict:
    """Look up an order.

    Args:
        order_id: The order number.
    """
    _record("get_order", order_id=order_id)
    return {"order_id": order_id, "status": "shipped", "total": 40}


@tool(risk="high", approval=lambda a: a["amount"] >= 20)
def issue_refund(order_id: str, amount: float, reason: str, ctx: ToolContext) -> dict:
    """Refund money to the customer."""
    _record("issue_refund", order_id=order_id, amount=amount, key=ctx.call_id, run=ctx.run_id)
    return {"refund_id": "R-" + order_id, "amount": amount}


@tool(risk="medium")
def add_note(customer_id: str, note: str) -> str:
    """Add a note to a customer."""
    _record("add_note", customer_id=customer_id)
    return "noted"


@tool(risk="high", idempotent=True)
def cancel_order(order_id: str, reason: str) -> str:
    """Cancel an order (idempotent in the backend)."""
    _record("cancel_order", order_id=order_id)
    return "cancelled"


@tool(timeout=0.2)
def slow(seconds: float) -> str:
    """Sleep."""
    time.sleep(seconds)
    return "slept"


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("backend down")


@tool
def big() -> str:
    """A huge result."""
    return "x" * 50_000


REGISTRY = ToolRegistry([get_order, issue_refund, add_note, cancel_order, slow, explode, big])


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


def make(model, **cfg):
    config = AgentConfig(system_prompt="You are a support agent.", **cfg)
    return Agent(model, REGISTRY, config)


def drive(agent, state, **kw):
    it = agent.run(state, **kw)
    events = list(it)
    for e in events:
        assert e.type in EVENT_TYPES
        json.dumps(e.data)  # every event is JSON-serialisable
    return events, it.outcome


def types(events):
    return [e.type for e in events]


def of(events, kind):
    return [e.data for e in events if e.type == kind]


def test_it_runs_tools_and_finishes_with_the_model_answer():
    model = ScriptedModel([call("get_order", order_id="A1"), "Order A1 has shipped."])
    agent = make(model)
    state = agent.start("Where is A1?", context={"run_id": "r1"})
    events, outcome = drive(agent, state)
    assert types(events) == [
        "run_started",
        "model_called",
        "tool_call_started",
        "tool_call_finished",
        "model_called",
        "run_finished",
    ]
    assert outcome == Finished("Order A1 has shipped.", "model")
    finished = of(events, "tool_call_finished")[0]
    assert finished["ok"] and finished["result"]["status"] == "shipped"
    assert of(events, "run_finished")[0]["final_answer"] == "Order A1 has shipped."
    # the model saw the tool result on its second call, linked by call id
    second = model.requests[1].messages
    assert isinstance(second[-1], ToolMessage) and "shipped" in second[-1].content
    assert second[-1].call_id == second[-2].tool_calls[0].id
    assert [s.name for s in model.requests[0].tools] == REGISTRY.names()
    model.assert_complete()


def test_wrong_case_keys_are_repaired_and_recorded():
    model = ScriptedModel([call("get_order", OrderId="A1"), "done"])
    events, _ = drive(make(model), make(model).start("x"))
    started = of(events, "tool_call_started")[0]
    assert started["arguments"] == {"order_id": "A1"}
    assert started["repaired"] == {"OrderId": "order_id"}
    assert CALLS == [("get_order", {"order_id": "A1"})]


def test_invalid_arguments_go_back_to_the_model_and_the_loop_continues():
    model = ScriptedModel([call("get_order", id=5), call("get_order", order_id="A1"), "ok"])
    agent = make(model)
    events, outcome = drive(agent, agent.start("x"))
    assert isinstance(outcome, Finished)
    err = model.requests[1].messages[-1]
    assert isinstance(err, ToolMessage) and err.is_error
    assert (
        "missing required argument 'order_id'" in err.content
        and "unexpected argument 'id'" in err.content
    )
    assert CALLS == [("get_order", {"order_id": "A1"})]


def test_an_unknown_tool_gets_an_error_listing_the_tools():
    model = ScriptedModel([call("launch_rocket"), "sorry"])
    agent = make(model)
    events, outcome = drive(agent, agent.start("x"))
    err = model.requests[1].messages[-1]
    assert err.is_error and "Unknown tool 'launch_rocket'" in err.content
    assert "get_order" in err.content and "issue_refund" in err.content
    assert outcome == Finished("sorry", "model")


def test_malformed_json_for_a_low_risk_tool_is_an_error_result():
    bad = call("get_order")
    bad.raw_arguments = '{"order_id": '
    model = ScriptedModel([bad, "gave up"])
    agent = make(model)
    drive(agent, agent.start("x"))
    err = model.requests[1].messages[-1]
    assert err.is_error and "not valid JSON" in err.content
    assert CALLS == []


def test_malformed_json_for_a_risky_tool_is_put_to_a_human():
    bad = call("add_note")
    bad.raw_arguments = "{customer_id: C1, note"
    model = ScriptedModel([bad])
    agent = make(model)
    state = agent.start("x")
    events, outcome = drive(agent, state)
    assert isinstance(outcome, NeedsApproval)
    assert outcome.calls[0].reason == "malformed_arguments" and outcome.calls[0].risk == "medium"
    assert CALLS == []
    # the approver supplies valid arguments
    agent.decide(
        state,
        [Decision(call_id=bad.id, approved=True, arguments={"customer_id": "C1", "note": "n"})],
    )
    model.enqueue("noted it")
    events, outcome = drive(agent, state)
    assert CALLS == [("add_note", {"customer_id": "C1"})] and outcome == Finished(
        "noted it", "model"
    )


def test_tool_exceptions_and_timeouts_become_error_results():
    model = ScriptedModel([[call("explode"), call("slow", seconds=5)], "both failed"])
    agent = make(model)
    t0 = time.perf_counter()
    events, outcome = drive(agent, agent.start("x"))
    assert time.perf_counter() - t0 < 3.0
    finished = of(events, "tool_call_finished")
    assert [f["ok"] for f in finished] == [False, False]
    assert "RuntimeError: backend down" in finished[0]["error"]
    assert "timed out after 0.2s" in finished[1]["error"]
    msgs = model.requests[1].messages
    assert msgs[-2].is_error and msgs[-1].is_error
    assert outcome == Finished("both failed", "model")


def test_a_tool_error_reaches_the_model_verbatim_and_other_errors_with_their_type(caplog):
    @tool
    def lookup(key: str) -> dict:
        """Look something up.

        Args:
            key: What to look up.
        """
        if key == "gone":
            raise ToolError("No record 'gone'. Keys look like 'K-100'.")
        raise KeyError(key)

    model = ScriptedModel([[call("lookup", key="gone"), call("lookup", key="odd")], "done"])
    agent = Agent(model, ToolRegistry([lookup]), AgentConfig(system_prompt=""))
    with caplog.at_level("WARNING", logger="agentweb.runtime.execution"):
        events, _ = drive(agent, agent.start("x"))
    sent = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [m.content for m in sent] == [
        "No record 'gone'. Keys look like 'K-100'.",
        "Error: KeyError: 'odd'",
    ]
    assert all(m.is_error for m in sent)
    finished = of(events, "tool_call_finished")
    assert [f["error"] for f in finished] == [m.content for m in sent]
    logged = [r for r in caplog.records if r.exc_info]
    assert len(logged) == 1 and logged[0].exc_info[0] is KeyError  # ToolError is not logged


def test_a_tool_error_subclass_is_verbatim_too():
    class RuleError(ToolError):
        pass

    @tool
    def act(x: int) -> int:
        """Do it.

        Args:
            x: A number.
        """
        raise RuleError(f"{x} is too big; at most 3.")

    model = ScriptedModel([call("act", x=9), "ok"])
    agent = Agent(model, ToolRegistry([act]), AgentConfig(system_prompt=""))
    drive(agent, agent.start("x"))
    assert model.requests[1].messages[-1].content == "9 is too big; at most 3."


def test_the_tool_timeout_setting_overrides_the_tools_own():
    model = ScriptedModel([call("slow", seconds=0.15), "ok"])
    agent = make(model, tool_timeout=0.05)
    events, _ = drive(agent, agent.start("x"))
    assert "timed out after 0.05s" in of(events, "tool_call_finished")[0]["error"]


def test_parallel_calls_run_concurrently_and_keep_their_order():
    gate = threading.Barrier(3, timeout=10)

    @tool
    def wait_then(tag: str) -> str:
        """Waits for the others."""
        gate.wait()
        return tag

    model = ScriptedModel([[call("wait_then", tag=t) for t in "abc"], "done"])
    agent = Agent(model, ToolRegistry([wait_then]), AgentConfig(system_prompt=""))
    events, outcome = drive(agent, agent.start("x"))
    results = model.requests[1].messages[-3:]
    assert [m.content for m in results] == ["a", "b", "c"]
    call_ids = [c.id for c in model.requests[1].messages[-4].tool_calls]
    assert [m.call_id for m in results] == call_ids
    assert [f["result"] for f in of(events, "tool_call_finished")] == ["a", "b", "c"]
    assert isinstance(outcome, Finished)


def test_oversized_results_are_cut_for_the_model_but_kept_in_the_event():
    model = ScriptedModel([call("big"), "ok"])
    agent = make(model, max_result_chars=100)
    events, _ = drive(agent, agent.start("x"))
    seen = model.requests[1].messages[-1].content
    assert seen.startswith("x" * 100) and "result cut: showing 100 of 50000" in seen
    finished = of(events, "tool_call_finished")[0]
    assert len(finished["result"]) == 50_000 and finished["truncated"] is True


def test_approval_pauses_and_resumes_in_another_process_via_json():
    model = ScriptedModel(
        [
            [
                call("get_order", order_id="A1"),
                call("issue_refund", order_id="A1", amount=25, reason="late"),
            ]
        ]
    )
    agent = make(model)
    state = agent.start("Refund A1", context={"run_id": "run-7"})
    events, outcome = drive(agent, state)
    assert types(events)[-2:] == ["tool_call_finished", "approval_requested"]
    assert isinstance(outcome, NeedsApproval)
    pending = outcome.calls[0]
    assert (pending.tool, pending.risk, pending.reason) == ("issue_refund", "high", "policy")
    assert pending.arguments == {"order_id": "A1", "amount": 25.0, "reason": "late"}
    assert CALLS == [("get_order", {"order_id": "A1"})]  # the other call of the turn ran
    assert state.status == "waiting_approval"
    # nothing happens while undecided
    assert agent.step(state).outcome == outcome

    blob = json.dumps(state.to_json())
    # ... a different process picks it up
    model2 = ScriptedModel(["Refunded 15 EUR."])
    agent2 = Agent(model2, REGISTRY, AgentConfig(system_prompt="You are a support agent."))
    restored = LoopState.from_json(json.loads(blob))
    assert restored == state
    decided = agent2.decide(
        restored,
        [
            Decision(
                call_id=pending.call_id,
                approved=True,
                comment="ok, 15 only",
                arguments={"order_id": "A1", "amount": 15, "reason": "late"},
            )
        ],
    )
    assert decided[0].type == "approval_decided"
    assert decided[0].data == {
        "call_id": pending.call_id,
        "decision": "approved",
        "comment": "ok, 15 only",
        "arguments": {"order_id": "A1", "amount": 15.0, "reason": "late"},
    }
    events, outcome = drive(agent2, restored)
    assert types(events) == [
        "tool_call_started",
        "tool_call_finished",
        "model_called",
        "run_finished",
    ]
    assert outcome == Finished("Refunded 15 EUR.", "model")
    assert CALLS[1] == (
        "issue_refund",
        {"order_id": "A1", "amount": 15.0, "key": pending.call_id, "run": "run-7"},
    )
    # the model saw both results, in the order it asked
    tail = model2.requests[0].messages[-2:]
    assert [m.name for m in tail] == ["get_order", "issue_refund"]


def test_a_rejection_goes_back_to_the_model_with_the_reason():
    model = ScriptedModel([call("issue_refund", order_id="A1", amount=50, reason="x")])
    agent = make(model)
    state = agent.start("x")
    _, outcome = drive(agent, state)
    agent.decide(
        state,
        [Decision(call_id=outcome.calls[0].call_id, approved=False, comment="policy says no")],
    )
    model.enqueue("I could not refund.")
    events, outcome = drive(agent, state)
    msg = model.requests[1].messages[-1]
    assert msg.is_error and "rejected" in msg.content and "policy says no" in msg.content
    assert CALLS == [] and outcome == Finished("I could not refund.", "model")


def test_decide_checks_ids_and_edited_arguments():
    model = ScriptedModel([call("issue_refund", order_id="A1", amount=50, reason="x")])
    agent = make(model)
    state = agent.start("x")
    _, outcome = drive(agent, state)
    with pytest.raises(KeyError):
        agent.decide(state, [Decision(call_id="nope", approved=True)])
    with pytest.raises(ToolArgumentError, match="amount"):
        agent.decide(
            state,
            [
                Decision(
                    call_id=outcome.calls[0].call_id,
                    approved=True,
                    arguments={"order_id": "A1", "amount": "lots", "reason": "x"},
                )
            ],
        )
    agent.decide(state, [Decision(call_id=outcome.calls[0].call_id, approved=False)])
    with pytest.raises(KeyError):
        agent.decide(state, [Decision(call_id=outcome.calls[0].call_id, approved=True)])


def test_small_refunds_need_no_approval_per_the_policy_and_risk_overrides_apply():
    model = ScriptedModel([call("issue_refund", order_id="A1", amount=5, reason="x"), "done"])
    agent = make(model)
    _, outcome = drive(agent, agent.start("x"))
    assert outcome == Finished("done", "model") and CALLS[0][0] == "issue_refund"
    model = ScriptedModel([call("get_order", order_id="A1")])
    agent = make(model, risk_overrides={"get_order": "high"})
    _, outcome = drive(agent, agent.start("x"))
    assert isinstance(outcome, NeedsApproval) and outcome.calls[0].risk == "high"


class RecordingJournal(InMemoryJournal):
    def __init__(self):
        super().__init__()
        self.begun = []

    def begin(self, call_id, tool, arguments):
        self.begun.append(call_id)
        return super().begin(call_id, tool, arguments)


def test_the_journal_reuses_a_recorded_result_instead_of_running_again():
    refund = call("issue_refund", order_id="A1", amount=25, reason="x")
    journal = RecordingJournal()
    model = ScriptedModel([refund])
    agent = Agent(model, REGISTRY, AgentConfig(system_prompt=""), journal=journal)
    state = agent.start("x")
    drive(agent, state)
    agent.decide(state, [Decision(call_id=refund.id, approved=True)])
    saved = json.dumps(state.to_json())  # persisted before the step below
    model.enqueue("done once")
    drive(agent, state)
    assert [c[0] for c in CALLS] == ["issue_refund"]
    # crash: the worker dies after the tool ran; another one resumes the saved state
    restored = LoopState.from_json(json.loads(saved))
    model2 = ScriptedModel(["done again"])
    agent2 = Agent(model2, REGISTRY, AgentConfig(system_prompt=""), journal=journal)
    events, outcome = drive(agent2, restored)
    assert [c[0] for c in CALLS] == ["issue_refund"]  # not executed twice
    finished = of(events, "tool_call_finished")[0]
    assert finished["reused"] is True and finished["result"]["refund_id"] == "R-A1"
    assert "R-A1" in model2.requests[0].messages[-1].content
    assert outcome == Finished("done again", "model")


def test_a_crash_mid_call_of_a_non_idempotent_tool_goes_to_a_human():
    class CrashedJournal(InMemoryJournal):
        def begin(self, call_id, tool, arguments):
            return PriorExecution("started")  # a record exists, no outcome

    model = ScriptedModel([call("issue_refund", order_id="A1", amount=5, reason="x")])
    agent = Agent(model, REGISTRY, AgentConfig(system_prompt=""), journal=CrashedJournal())
    state = agent.start("x")
    events, outcome = drive(agent, state)
    assert isinstance(outcome, NeedsApproval)
    assert outcome.calls[0].reason == "unknown_outcome"
    assert of(events, "approval_requested")[0]["reason"] == "unknown_outcome"
    assert CALLS == []
    # a human checked the backend and says: run it again
    agent.decide(state, [Decision(call_id=outcome.calls[0].call_id, approved=True)])
    model.enqueue("done")
    _, outcome = drive(agent, state)
    assert [c[0] for c in CALLS] == ["issue_refund"] and outcome == Finished("done", "model")


def test_an_idempotent_tool_is_rerun_after_a_crash():
    class CrashedJournal(InMemoryJournal):
        def begin(self, call_id, tool, arguments):
            return PriorExecution("started")

    model = ScriptedModel([call("get_order", order_id="A1"), "ok"])
    agent = Agent(model, REGISTRY, AgentConfig(system_prompt=""), journal=CrashedJournal())
    _, outcome = drive(agent, agent.start("x"))
    assert CALLS == [("get_order", {"order_id": "A1"})] and outcome == Finished("ok", "model")


def test_a_repeated_identical_call_gets_a_reminder_then_a_forced_stop():
    model = ScriptedModel(
        ["Probably shipped."] * 0
        + [AssistantMessage(content="Let me check.", tool_calls=[call("get_order", order_id="A1")])]
        + [call("get_order", order_id="A1"), call("get_order", order_id="A1")]
    )
    agent = make(model)
    events, outcome = drive(agent, agent.start("x"))
    reminder = model.requests[2].messages[-1]
    assert reminder.is_error and "Do not repeat the same call" in reminder.content
    assert len(CALLS) == 1  # the repeat was not executed
    assert outcome.decided_by == "bounds" and "repeating" in outcome.reason
    assert outcome.answer == "Let me check."  # best answer so far


def test_no_progress_stops_the_run():
    # A and B alternate forever with the same results
    replies = []
    for _ in range(6):
        replies += [call("get_order", order_id="A1"), call("get_order", order_id="B2")]
    model = ScriptedModel(replies)
    agent = make(model, max_no_progress=3)
    events, outcome = drive(agent, agent.start("x"))
    assert isinstance(outcome, Failed) and "no progress" in outcome.reason
    assert model.remaining > 0 and len(CALLS) == 5


def test_max_iterations_is_a_hard_bound():
    model = ScriptedModel(
        [
            AssistantMessage(content=f"step {i}", tool_calls=[call("get_order", order_id=f"A{i}")])
            for i in range(5)
        ]
    )
    agent = make(model, max_iterations=3)
    events, outcome = drive(agent, agent.start("x"))
    assert outcome == Finished("step 2", "bounds", "reached the limit of 3 iterations")
    assert len(of(events, "model_called")) == 3
    model = ScriptedModel([call("get_order", order_id=f"A{i}") for i in range(5)])
    agent = make(model, max_iterations=2)
    _, outcome = drive(agent, agent.start("x"))
    assert isinstance(outcome, Failed) and "2 iterations" in outcome.reason


def test_the_validator_decides_first_and_can_send_the_model_back():
    seen = []

    def validator(answer, state):
        seen.append(answer)
        if "refunded" in answer and not any(c[0] == "issue_refund" for c in CALLS):
            return "No refund exists in the ledger. Do not claim one; issue it or say so."
        return None

    model = ScriptedModel(
        [
            "I refunded it.",
            call("issue_refund", order_id="A1", amount=5, reason="r"),
            "I refunded it.",
        ]
    )
    agent = Agent(model, REGISTRY, AgentConfig(system_prompt=""), validator=validator)
    events, outcome = drive(agent, agent.start("x"))
    assert outcome == Finished("I refunded it.", "validator")
    assert of(events, "run_finished")[0]["decided_by"] == "validator"
    assert isinstance(model.requests[1].messages[-1], UserMessage)
    assert "No refund exists" in model.requests[1].messages[-1].content
    assert seen == ["I refunded it.", "I refunded it."]
    objected = of(events, "completion_objected")
    assert objected == [
        {
            "validator": validator.__module__ + "." + validator.__qualname__,
            "reason": "No refund exists in the ledger. Do not claim one; issue it or say so.",
        }
    ]


def test_an_objection_is_an_event_named_by_the_validator_name_given():
    model = ScriptedModel(["first", "second"])
    answers = iter(["Not yet.", None])
    agent = Agent(
        model,
        REGISTRY,
        AgentConfig(system_prompt=""),
        validator=lambda answer, state: next(answers),
        validator_name="shop.claims",
    )
    events, outcome = drive(agent, agent.start("x"))
    assert outcome == Finished("second", "validator")
    kinds = [e.type for e in events]
    assert kinds.index("completion_objected") < kinds.index("run_finished")
    assert of(events, "completion_objected") == [{"validator": "shop.claims", "reason": "Not yet."}]


def test_without_a_validator_nothing_objects():
    agent = Agent(ScriptedModel(["I refunded it."]), REGISTRY, AgentConfig(system_prompt=""))
    events, outcome = drive(agent, agent.start("x"))
    assert outcome == Finished("I refunded it.", "model")
    assert of(events, "completion_objected") == []


def test_cancellation_is_checked_between_steps():
    model = ScriptedModel([call("get_order", order_id="A1"), "never"])
    agent = make(model)
    state = agent.start("x")
    # cancelled while the first reply was coming: that reply's call never runs
    events, outcome = drive(agent, state, cancel=lambda: len(model.requests) >= 1)
    assert types(events)[-1] == "run_cancelled" and outcome == Cancelled()
    assert state.status == "cancelled" and model.remaining == 1
    assert "tool_call_started" not in types(events)


def test_a_model_error_fails_the_run():
    model = ScriptedModel([ModelTimeout("openai: no reply within the timeout")])
    agent = make(model)
    events, outcome = drive(agent, agent.start("x"))
    assert isinstance(outcome, Failed) and "no reply within the timeout" in outcome.reason
    assert types(events) == ["run_started", "run_failed"]


def test_text_calls_and_think_blocks_from_a_model_without_native_tools():
    model = ScriptedModel(
        [
            '<think>maybe {"name": "issue_refund", "arguments": {}}</think>I will check.\n'
            '```json\n{"name": "get_order", "arguments": {"order_id": "A1"}}\n```',
            'Thought: I need more.\nAction: get_order\nAction Input: {"order_id": "B2"}',
            'Here it is:\n```json\n{"order_id": "A1", "status": "shipped"}\n```',
        ]
    )
    agent = make(model)
    events, outcome = drive(agent, agent.start("x"))
    assert CALLS == [("get_order", {"order_id": "A1"}), ("get_order", {"order_id": "B2"})]
    called = of(events, "model_called")
    assert called[0]["text"] == "I will check." and "issue_refund" in called[0]["reasoning"]
    assert outcome.answer.startswith("Here it is:")


def test_streaming_passes_deltas_through():
    model = ScriptedModel(["A fairly long streamed answer."])
    agent = make(model, stream=True)
    deltas = []
    drive(agent, agent.start("x"), on_delta=deltas.append)
    assert "".join(deltas) == "A fairly long streamed answer." and model.requests[0].streamed


def test_the_context_policy_decides_what_the_model_sees():
    class LastTwo(ContextPolicy):
        def prepare(self, state, registry):
            msgs = state.messages[:1] + state.messages[-1:]
            return PreparedContext(
                msgs,
                registry.specs(["get_order"]),
                [
                    ContextCompacted(
                        tokens_before=10, tokens_after=5, budget=8, actions=[], window_start=0
                    )
                ],
            )

    model = ScriptedModel([call("get_order", order_id="A1"), "ok"])
    agent = Agent(model, REGISTRY, AgentConfig(system_prompt="sys"), context_policy=LastTwo())
    events, _ = drive(agent, agent.start("x"))
    assert types(events).count("context_compacted") == 2
    assert [len(r.messages) for r in model.requests] == [2, 2]
    assert [s.name for s in model.requests[0].tools] == ["get_order"]


def test_allowed_tools_limit_what_the_agent_offers_and_runs():
    model = ScriptedModel([call("issue_refund", order_id="A", amount=1, reason="r"), "ok"])
    agent = make(model, allowed_tools=["get_order", "not_loaded"])
    drive(agent, agent.start("x"))
    assert [s.name for s in model.requests[0].tools] == ["get_order"]
    assert (
        "Unknown tool 'issue_refund'. Available tools: get_order."
        in model.requests[1].messages[-1].content
    )
    assert CALLS == []


def test_duplicate_provider_ids_across_turns_are_made_unique():
    # some servers number calls call_0, call_1 … afresh every turn
    model = ScriptedModel(
        [
            [call("get_order", order_id="A1").model_copy(update={"id": "call_0"})],
            [call("get_order", order_id="B2").model_copy(update={"id": "call_0"})],
            "ok",
        ]
    )
    agent = make(model)
    events, _ = drive(agent, agent.start("x"))
    ids = [e["call_id"] for e in of(events, "tool_call_finished")]
    assert ids[0] == "call_0" and ids[1] != "call_0"
    assert len(CALLS) == 2  # the journal did not confuse the second call with the first


def test_an_empty_reply_gets_a_nudge():
    model = ScriptedModel(["", "Now an answer."])
    agent = make(model)
    _, outcome = drive(agent, agent.start("x"))
    assert outcome == Finished("Now an answer.", "model")
    assert "empty" in model.requests[1].messages[-1].content


def test_state_round_trips_mid_run_and_step_by_step_equals_run():
    model = ScriptedModel([call("get_order", order_id="A1"), "done"])
    agent = make(model)
    state = agent.start("x")
    first = agent.step(state)  # the model's reply, its calls planned and not run yet
    assert first.outcome is None
    assert types(first.events) == ["run_started", "model_called"]
    assert state.turn is not None and [c.state for c in state.turn] == ["queued"]
    state = LoopState.from_json(json.loads(json.dumps(state.to_json())))
    tools_step = agent.step(state)  # the stored calls run; the model is not asked
    assert types(tools_step.events) == ["tool_call_started", "tool_call_finished"]
    assert tools_step.outcome is None and len(model.requests) == 1
    state = LoopState.from_json(json.loads(json.dumps(state.to_json())))
    third = agent.step(state)
    assert third.outcome == Finished("done", "model")
    assert state.usage.output_tokens == 1 and state.iteration == 2
    assert agent.step(state).outcome == third.outcome  # terminal: nothing more happens


def test_a_failed_call_may_be_retried_once_as_is():
    attempts = []

    @tool
    def flaky(order_id: str) -> str:
        """Fails the first time."""
        attempts.append(order_id)
        if len(attempts) == 1:
            raise ConnectionError("backend hiccup")
        return "fine"

    model = ScriptedModel([call("flaky", order_id="A1"), call("flaky", order_id="A1"), "ok"])
    agent = Agent(model, ToolRegistry([flaky]), AgentConfig(system_prompt=""))
    _, outcome = drive(agent, agent.start("x"))
    assert attempts == ["A1", "A1"] and outcome == Finished("ok", "model")
    assert model.requests[2].messages[-1].content == "fine"


def test_a_call_failing_the_same_way_forever_stops_for_no_progress():
    @tool
    def broken(order_id: str) -> str:
        """Always fails."""
        raise ConnectionError("down")

    model = ScriptedModel([call("broken", order_id="A1")] * 10)
    agent = Agent(model, ToolRegistry([broken]), AgentConfig(system_prompt=""))
    _, outcome = drive(agent, agent.start("x"))
    assert isinstance(outcome, Failed) and "no progress" in outcome.reason
    assert model.remaining == 6


def test_approving_unreadable_arguments_without_corrections_does_not_run_the_tool():
    @tool(risk="high")
    def reset_all(confirm: bool = True) -> str:
        """Dangerous; every argument has a default."""
        CALLS.append(("reset_all", {}))
        return "reset"

    bad = call("reset_all")
    bad.raw_arguments = "{confirm: yes"
    model = ScriptedModel([bad])
    agent = Agent(model, ToolRegistry([reset_all]), AgentConfig(system_prompt=""))
    state = agent.start("x")
    drive(agent, state)
    agent.decide(state, [Decision(call_id=bad.id, approved=True)])
    model.enqueue("ok")
    _, outcome = drive(agent, state)
    assert CALLS == [] and outcome == Finished("ok", "model")
    msg = model.requests[1].messages[-1]
    assert msg.is_error and "could not be read" in msg.content


def test_the_tool_pool_reuses_its_threads():
    from agentweb.runtime.execution import ToolPool

    pool = ToolPool(max_workers=2)
    names = [pool.submit(lambda: threading.current_thread().name).result(2) for _ in range(20)]
    assert len(set(names)) <= 2
    gate = threading.Barrier(2, timeout=5)
    futs = [pool.submit(gate.wait) for _ in range(2)]  # both run at once
    assert sorted(f.result(5) for f in futs) == [0, 1]
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("agentweb-tool"))
    boom = pool.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        boom.result(2)


def test_a_failing_preview_callback_does_not_break_the_run():
    def on_delta(text):
        raise ConnectionError("redis down")

    model = ScriptedModel(["A fairly long streamed answer."])
    agent = make(model, stream=True)
    _, outcome = drive(agent, agent.start("x"), on_delta=on_delta)
    assert outcome == Finished("A fairly long streamed answer.", "model")


def test_a_crashing_validator_fails_the_run_clearly():
    def validator(answer, state):
        raise LookupError("ledger unavailable")

    model = ScriptedModel(["Done."])
    agent = Agent(model, REGISTRY, AgentConfig(system_prompt=""), validator=validator)
    events, outcome = drive(agent, agent.start("x"))
    assert outcome == Failed("validator error: LookupError: ledger unavailable")
    assert types(events)[-1] == "run_failed"
