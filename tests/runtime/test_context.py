"""Layered context: budget, protocol, compaction and pinned facts (no database)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentweb.runtime import (
    Agent,
    AgentConfig,
    AssistantMessage,
    Decision,
    Finished,
    LoopState,
    NeedsApproval,
    SystemMessage,
    ToolMessage,
    ToolRegistry,
    UserMessage,
    tool,
    trace,
)
from agentweb.runtime.compaction import digest_result, repair, superseded, valid_protocol
from agentweb.runtime.context import ContextHints, ContextPolicy, PreparedContext
from agentweb.runtime.context import LayeredContextPolicy as GenericPolicy
from agentweb.runtime.events import CONTEXT_COMPACTED, MODEL_CALLED
from agentweb.runtime.gateway import ModelHTTPError
from agentweb.runtime.messages import Message, ToolCall
from agentweb.runtime.testing import ScriptedModel, call
from agentweb.runtime.tokens import EstimateCounter, tiktoken_counter

# The runtime knows no domain: these tests play a small shop and pass its hints, as the
# application passes a loaded domain's CONTEXT_HINTS.
SHOP_HINTS = ContextHints(
    fact_keys=("order_id", "customer_id", "tracking_number", "sku"),
    fact_patterns={
        "order_id": r"(?i)\border\s*(?:id|#)?\s*[:#]?\s*([A-Z]{1,4}-?\d{3,})\b",
        "customer_id": r"(?i)\bcustomer\s*(?:id|#)?\s*[:#]?\s*([A-Z]{1,4}-?\d{2,})\b",
        "tracking_number": r"\b(1Z[0-9A-Z]{16})\b",
    },
    synonyms={"money": ("refund", "payment"), "parcel": ("shipment", "track")},
)


class LayeredContextPolicy(GenericPolicy):
    """The layered policy with the test shop's hints."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**SHOP_HINTS.options(), **kwargs})


TRACKING = "1Z999AA10123456784"


def _without_position(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("position", "made_for_call")}


@tool
def get_order(order_id: str) -> dict[str, Any]:
    """Look up an order: status, items, amounts and shipments.

    Args:
        order_id: The order id, e.g. "A1001".
    """
    items = [
        {"sku": f"KIT-{i:04d}", "name": f"Garden widget model {i}", "qty": 1, "price": 9.99}
        for i in range(40)
    ]
    return {
        "order_id": order_id,
        "customer_id": "C042",
        "status": "shipped",
        "total": 399.6,
        "tracking_number": TRACKING,
        "items": items,
    }


@tool
def search_kb(query: str) -> dict[str, Any]:
    """Search the knowledge base for policies and how-tos.

    Args:
        query: A few keywords.
    """
    body = "Customers may return items within 30 days of delivery. " * 12
    return {
        "articles": [{"id": f"KB-{i}", "title": f"{query} {i}", "body": body} for i in range(5)]
    }


@tool
def track_shipment(tracking_number: str) -> dict[str, Any]:
    """Track a parcel with the carrier.

    Args:
        tracking_number: The carrier tracking number.
    """
    return {"tracking_number": tracking_number, "status": "in transit", "carrier": "UPS"}


@tool
def get_customer(customer_id: str) -> dict[str, Any]:
    """Look up a customer: contact details and tier.

    Args:
        customer_id: The customer id, e.g. "C042".
    """
    return {"customer_id": customer_id, "name": "Ada Example", "tier": "gold"}


@tool
def check_inventory(sku: str) -> dict[str, Any]:
    """Check stock of a product.

    Args:
        sku: The product SKU.
    """
    return {"sku": sku, "available": 3}


@tool(risk="high", approval=lambda a: a["amount"] >= 20)
def issue_refund(order_id: str, amount: float, reason: str) -> dict[str, Any]:
    """Refund money on an order to the original payment method.

    Args:
        order_id: The order id.
        amount: The amount to refund.
        reason: Why.
    """
    return {"refund_id": f"R-{order_id}", "order_id": order_id, "amount": amount}


@tool(risk="medium")
def add_customer_note(customer_id: str, note: str) -> dict[str, Any]:
    """Add an internal note to the customer's record.

    Args:
        customer_id: The customer id.
        note: The note.
    """
    return {"customer_id": customer_id, "saved": True}


TOOLS = ToolRegistry(
    [
        get_order,
        search_kb,
        track_shipment,
        get_customer,
        check_inventory,
        issue_refund,
        add_customer_note,
    ]
)
TASK = "Customer C042 says order A1001 arrived broken and wants a refund of 25.00."


def assert_valid(messages: list[Message]) -> None:
    """One system message first; each tool result right after the call that asked for it;
    every call answered."""
    assert isinstance(messages[0], SystemMessage)
    assert sum(isinstance(m, SystemMessage) for m in messages) == 1
    pending: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            assert m.call_id in pending, f"orphan tool result {m.call_id}"
            pending.remove(m.call_id)
            continue
        assert not pending, f"calls without results: {pending}"
        if isinstance(m, AssistantMessage) and m.tool_calls:
            pending = {c.id for c in m.tool_calls}
    assert not pending, f"calls without results: {pending}"


def sent_tokens(request: Any) -> int:
    counter = EstimateCounter()
    return counter.count_messages(request.messages) + counter.count_tools(request.tools)


def script_40_steps() -> list[Any]:
    """40 model calls: lookups with long results, parallel calls, a failed call and its
    correction, a refund that needs approval, and the answer."""
    replies: list[Any] = []
    for i in range(39):
        order = f"A{1001 + i}"
        kind = i % 6
        if i == 20:
            replies.append(call("issue_refund", order_id="A1001", amount=25.0, reason="broken"))
        elif kind == 0:
            replies.append(call("get_order", order_id=order))
        elif kind == 1:
            replies.append(call("search_kb", query=f"return policy {i}"))
        elif kind == 2:
            replies.append(
                [
                    call("track_shipment", tracking_number=f"1Z{i}"),
                    call("check_inventory", sku=f"KIT-{i:04d}"),
                ]
            )
        elif kind == 3:
            replies.append(call("get_customer", customer_id=1234))  # wrong type: an error result
        elif kind == 4:
            replies.append(call("get_customer", customer_id=f"C{i:03d}"))
        else:
            replies.append(
                AssistantMessage(
                    content=f"Checked step {i}.", tool_calls=[call("get_order", order_id=order)]
                )
            )
    replies.append("I refunded 25.00 on order A1001 (tracking 1Z999AA10123456784).")
    return replies


def run_to_end(agent: Agent, state: LoopState, events: list[Any]) -> Any:
    run = agent.run(state)
    events.extend(run)
    return run.outcome


@pytest.mark.parametrize("with_summarizer", [False, True])
def test_it_keeps_a_40_step_run_under_budget_with_a_valid_protocol(with_summarizer: bool) -> None:
    budget = 3000
    model = ScriptedModel(script_40_steps())
    summaries = 0

    def summarize(messages: Any, tools: Any) -> str:
        nonlocal summaries
        summaries += 1
        return f"Summary {summaries}: looked up orders A1001 and more; refund pending."

    summarizer = ScriptedModel([summarize] * 40, name="summarizer") if with_summarizer else None
    config = AgentConfig(system_prompt="You are a support agent.", max_iterations=60)

    def agent() -> Agent:  # a new agent and policy each time, as in another process
        policy = LayeredContextPolicy(budget, summarizer=summarizer, top_n=4)
        return Agent(model, TOOLS, config, context_policy=policy)

    state = agent().start(TASK)
    events: list[Any] = []
    outcome = run_to_end(agent(), state, events)
    assert isinstance(outcome, NeedsApproval)
    saved = json.dumps(state.to_json())
    state = LoopState.from_json(json.loads(saved))
    assert state.memory["context"]["facts"]
    a = agent()
    events.extend(a.decide(state, [Decision(call_id=outcome.calls[0].call_id, approved=True)]))
    outcome = run_to_end(a, state, events)
    assert isinstance(outcome, Finished)
    model.assert_complete()

    assert len(model.requests) == 40
    for n, request in enumerate(model.requests, start=1):
        assert_valid(request.messages)
        assert sent_tokens(request) <= budget, f"call {n} is over budget"
        assert request.messages[1].content == TASK  # the task is pinned
        assert request.tools, "no tool offered"
        assert len(request.tools) <= 4 + len(
            {
                "get_order",
                "search_kb",
                "track_shipment",
                "check_inventory",
                "get_customer",
                "issue_refund",
            }
        )
    # the whole record is intact: nothing was removed from the state
    calls = [c for m in state.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert len(calls) == 45  # 39 tool turns, 6 of them with two calls
    assert sum(isinstance(m, ToolMessage) for m in state.messages) == len(calls)
    called = [e.data for e in events if e.type == MODEL_CALLED]
    assert len(called) == 40
    for data in called:
        ctx = data["context"]
        assert ctx["tokens"] <= ctx["budget"] == budget
        assert [layer["layer"] for layer in ctx["layers"]][:2] == ["system", "task"]
        assert ctx["tools"]["offered"]
    # The trace: each call's stored `sent` gives back exactly the messages and tool specs
    # that call was sent (the memory message and digests too), through JSON as stored.
    stored = json.loads(json.dumps(called))
    resolved = trace.resolve(d.get("sent") for d in stored)
    for n, (request, got) in enumerate(zip(model.requests, resolved, strict=True), start=1):
        assert got is not None
        want = [trace.message_json(m) for m in request.messages]
        assert [_without_position(m) for m in got["messages"]] == want, f"call {n}"
        assert got["tools"] == [trace.spec_json(t) for t in request.tools], f"call {n}"
    assert any(m.get("made_for_call") for got in resolved if got for m in got["messages"])
    # each message of the record is stored once; specs only when they change
    assert sum(len(d["sent"]["new"]) for d in stored) == len(state.messages) - 1
    assert sum("tools" in d["sent"] for d in stored) < len(stored)
    compacted = [e.data for e in events if e.type == CONTEXT_COMPACTED]
    assert compacted
    assert any("evicted" in d for d in compacted)
    assert any("digested" in d for d in compacted)
    assert any("dropped_superseded" in d for d in compacted)
    for d in compacted:
        assert d["tokens_after"] <= budget
        assert isinstance(d["tokens_before"], int)
        json.dumps(d)
    last = model.requests[-1].messages
    memory = next(
        m.content for m in last if isinstance(m, UserMessage) and "Pinned facts" in m.content
    )
    for fact in ("A1001", "C042", TRACKING, "amount=25.0"):
        assert fact in memory
    if with_summarizer:
        assert summaries >= 1
        assert f"Summary {summaries}" in memory
        assert any(d.get("summarized", {}).get("by") == "model" for d in compacted)
        assert state.usage.input_tokens == 0  # scripted models report no input tokens
    else:
        assert any(d.get("summarized", {}).get("by") == "steps" for d in compacted)


def test_it_never_loses_a_pinned_fact_whatever_is_compacted() -> None:
    replies: list[Any] = [call("get_order", order_id="A1001")]
    replies += [call("search_kb", query=f"policy {i}") for i in range(12)]
    replies.append("done")
    model = ScriptedModel(replies)
    policy = LayeredContextPolicy(1500, digest_over_chars=500)
    agent = Agent(
        model, TOOLS, AgentConfig(system_prompt="sys", max_iterations=30), context_policy=policy
    )
    state = agent.start("Please look into my order.")
    list(agent.run(state))
    last = model.requests[-1].messages
    # the get_order call and its result left the window long ago ...
    assert not any(isinstance(m, ToolMessage) and m.name == "get_order" for m in last)
    # ... but its ids are pinned
    text = "\n".join(m.content for m in last)
    for fact in ("order_id: A1001", "C042", TRACKING, "KIT-0000"):
        assert fact in text
    assert state.memory["context"]["facts"]["order_id"] == ["A1001"]


def test_it_digests_an_old_long_result_and_keeps_the_full_one_in_the_record() -> None:
    model = ScriptedModel(
        [call("get_order", order_id="A1001"), call("check_inventory", sku="KIT-0001"), "ok"]
    )
    agent = Agent(
        model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=LayeredContextPolicy()
    )
    state = agent.start("Order A1001?")
    events = list(agent.run(state))
    full = next(m for m in state.messages if isinstance(m, ToolMessage) and m.name == "get_order")
    assert len(full.content) > 2000
    # the call right after the lookup sees it in full ...
    seen = next(m for m in model.requests[1].messages if isinstance(m, ToolMessage))
    assert seen.content == full.content
    # ... later ones see a digest: size, item count, key fields
    digest = next(
        m
        for m in model.requests[2].messages
        if isinstance(m, ToolMessage) and m.name == "get_order"
    )
    assert digest.content.startswith("[digest of a")
    assert "items: 40 items" in digest.content
    assert 'order_id="A1001"' in digest.content and 'status="shipped"' in digest.content
    assert len(digest.content) < 1000
    compacted = [e.data for e in events if e.type == CONTEXT_COMPACTED]
    assert len(compacted) == 1
    assert compacted[0]["digested"] == [full.call_id]
    assert compacted[0]["tokens_after"] < compacted[0]["tokens_before"]


def test_digests_of_lists_and_text() -> None:
    rows = json.dumps([{"id": f"X{i}", "status": "open", "blob": "z" * 90} for i in range(30)])
    d = digest_result("list_things", rows)
    assert "30 items" in d and 'id="X0"' in d
    text = digest_result("fetch_page", "word " * 1000)
    assert "5,000-character fetch_page result" in text and text.endswith("…")


def test_it_summarizes_evicted_steps_with_the_summarizer_and_falls_back_when_it_fails() -> None:
    summaries: list[Any] = [ModelHTTPError("fake", 500, "down"), "Looked up A1001 and KB."]
    summarizer = ScriptedModel(summaries + ["More steps."] * 10, name="summarizer")
    replies: list[Any] = [call("search_kb", query=f"returns {i}") for i in range(14)] + ["done"]
    model = ScriptedModel(replies)
    policy = LayeredContextPolicy(1400, summarizer=summarizer)
    config = AgentConfig(system_prompt="sys", max_iterations=30, stream=True)
    agent = Agent(model, TOOLS, config, context_policy=policy)
    state = agent.start("Order A1001: what is the return policy?")
    events = list(agent.run(state, on_delta=lambda text: None))
    assert isinstance(state.outcome, Finished)
    # summaries are blocking calls made before a model call, never during a streamed one
    assert all(r.streamed for r in model.requests)
    assert summarizer.requests and not any(r.streamed for r in summarizer.requests)
    compacted = [e.data for e in events if e.type == CONTEXT_COMPACTED and "summarized" in e.data]
    assert compacted[0]["summarized"]["by"] == "steps"
    assert "HTTP 500" in compacted[0]["summary_error"]
    assert compacted[1]["summarized"]["by"] == "model"
    # the summarizer was asked with the earlier summary and the evicted steps
    asked = summarizer.requests[1].messages
    assert isinstance(asked[0], SystemMessage) and "summary" in asked[0].content.lower()
    assert "Summary so far" in asked[1].content and "search_kb" in asked[1].content
    assert not summarizer.requests[1].tools
    seen = model.requests[-1].messages
    assert any(
        "Summary of the earlier steps" in m.content for m in seen if isinstance(m, UserMessage)
    )
    assert all(len(r.messages) < 12 for r in model.requests)


def test_it_drops_a_failed_call_once_a_later_call_of_that_tool_succeeded() -> None:
    model = ScriptedModel(
        [
            call("get_customer", customer_id=42),
            call("get_customer", customer_id="C042"),
            call("check_inventory", sku="KIT-0001"),
            "done",
        ]
    )
    agent = Agent(
        model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=LayeredContextPolicy()
    )
    state = agent.start("Who is customer C042?")
    events = list(agent.run(state))
    failed = next(m for m in state.messages if isinstance(m, ToolMessage) and m.is_error)
    # the error was shown once, when it was news
    assert any(
        isinstance(m, ToolMessage) and m.call_id == failed.call_id
        for m in model.requests[1].messages
    )
    for request in model.requests[2:]:
        ids = {
            c.id for m in request.messages if isinstance(m, AssistantMessage) for c in m.tool_calls
        }
        assert failed.call_id not in ids
        assert not any(
            isinstance(m, ToolMessage) and m.call_id == failed.call_id for m in request.messages
        )
        assert_valid(request.messages)
    assert failed in state.messages  # still in the record
    dropped = [e.data["dropped_superseded"] for e in events if "dropped_superseded" in e.data]
    assert dropped == [{"messages": [], "calls": [failed.call_id]}]


def test_a_human_rejection_is_never_dropped_as_a_correction() -> None:
    model = ScriptedModel(
        [
            call("issue_refund", order_id="A1001", amount=80.0, reason="broken"),
            call("issue_refund", order_id="A1001", amount=15.0, reason="goodwill"),
            call("check_inventory", sku="KIT-0001"),
            "Refunded 15.00.",
        ]
    )
    agent = Agent(
        model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=LayeredContextPolicy()
    )
    state = agent.start("Refund order A1001")
    outcome = agent.run(state)
    list(outcome)
    pending = outcome.outcome
    assert isinstance(pending, NeedsApproval)
    agent.decide(
        state,
        [Decision(call_id=pending.calls[0].call_id, approved=False, comment="too much, max 15")],
    )
    list(agent.run(state))
    last = model.requests[-1].messages
    assert any(isinstance(m, ToolMessage) and "too much, max 15" in m.content for m in last)
    facts = state.memory["context"]["facts"]
    assert any("too much, max 15" in f for f in facts["rejected"])
    assert facts["amount_decided"] == [
        "issue_refund(order_id=A1001, reason=goodwill): amount=15.0 (done)"
    ]


def test_only_the_latest_objection_to_an_answer_stays() -> None:
    objections = iter(["No refund was made yet.", "Still no refund."])

    def validator(answer: str, state: LoopState) -> str | None:
        return next(objections, None)

    model = ScriptedModel(["Refunded.", "Refunded, really.", "Sorry: no refund was possible."])
    agent = Agent(
        model,
        TOOLS,
        AgentConfig(system_prompt="sys"),
        validator=validator,
        context_policy=LayeredContextPolicy(),
    )
    state = agent.start("Refund A1001")
    list(agent.run(state))
    last = [m.content for m in model.requests[-1].messages]
    assert "Still no refund." in last and "Refunded, really." in last
    assert "No refund was made yet." not in last and "Refunded." not in last


def test_superseded_and_repair_on_their_own() -> None:
    c1 = ToolCall(id="c1", name="t", arguments={})
    c2 = ToolCall(id="c2", name="t", arguments={})
    msgs: list[Message] = [
        SystemMessage(content="s"),
        UserMessage(content="task"),
        ToolMessage(call_id="zz", name="t", content="orphan"),
        AssistantMessage(tool_calls=[c1, c2]),
        ToolMessage(call_id="c1", name="t", content="ok"),
        AssistantMessage(content="", tool_calls=[ToolCall(id="c3", name="t")]),
        UserMessage(content="go on"),
    ]
    fixed, kept = repair(msgs)
    assert kept == [0, 1, 3, 4, 6]
    stripped = fixed[2]
    assert isinstance(stripped, AssistantMessage)
    assert [c.id for c in stripped.tool_calls] == ["c1"]  # the unanswered call is stripped
    assert valid_protocol(fixed) == list(range(len(fixed)))
    positions, calls = superseded(msgs)
    assert positions == set() and calls == set()


def test_tools_are_ranked_the_used_ones_stay_and_there_is_always_one() -> None:
    model = ScriptedModel(
        [
            call("get_customer", customer_id="C042"),
            AssistantMessage(
                content="Now the refund.",
                tool_calls=[call("issue_refund", order_id="A1", amount=5.0, reason="x")],
            ),
            "done",
        ]
    )
    policy = LayeredContextPolicy(top_n=2)
    agent = Agent(model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=policy)
    state = agent.start("Refund money on order A1 for the customer")
    events = list(agent.run(state))
    offered = [[t.name for t in r.tools] for r in model.requests]
    assert "issue_refund" in offered[0]
    assert len(offered[0]) == 2
    assert "get_customer" in offered[1] and "get_customer" in offered[2]  # used: stays
    assert "issue_refund" in offered[2]
    info = [e.data["context"]["tools"] for e in events if e.type == MODEL_CALLED]
    assert info[2]["pinned"] == ["get_customer", "issue_refund"]
    assert info[0]["allowed"] == len(TOOLS) and info[0]["ranked"] is True
    # a task that matches no tool still gets top_n tools
    model = ScriptedModel(["hello"])
    agent = Agent(
        model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=LayeredContextPolicy(top_n=3)
    )
    list(agent.run(agent.start("zzz qqq")))
    assert len(model.requests[0].tools) == 3
    # a small registry is offered whole
    model = ScriptedModel(["hello"])
    agent = Agent(
        model,
        TOOLS,
        AgentConfig(system_prompt="sys"),
        context_policy=LayeredContextPolicy(top_n=20),
    )
    list(agent.run(agent.start("zzz")))
    assert [t.name for t in model.requests[0].tools] == TOOLS.names()


def test_search_tools_offers_what_it_found_from_the_next_step_on() -> None:
    policy = LayeredContextPolicy(top_n=2)
    tools = policy.with_search_tool(TOOLS)
    assert "search_tools" in tools and len(tools) == len(TOOLS) + 1
    assert policy.with_search_tool(ToolRegistry([get_order])).names() == ["get_order"]
    model = ScriptedModel(
        [
            call("search_tools", query="note on the customer record"),
            call("add_customer_note", customer_id="C042", note="called"),
            "done",
        ]
    )
    agent = Agent(model, tools, AgentConfig(system_prompt="sys"), context_policy=policy)
    state = agent.start("What is the weather?")
    events = list(agent.run(state))
    offered = [[t.name for t in r.tools] for r in model.requests]
    assert "search_tools" in offered[0] and "add_customer_note" not in offered[0]
    assert "add_customer_note" in offered[1]
    finished = [e.data for e in events if e.data.get("tool") == "search_tools" and "ok" in e.data]
    assert finished[0]["ok"] and finished[0]["result"]["found"][0]["name"] == "add_customer_note"
    assert isinstance(state.outcome, Finished)


def test_model_called_carries_what_the_model_saw_and_the_default_policy_adds_nothing() -> None:
    model = ScriptedModel(
        [call("get_order", order_id="A1001"), call("check_inventory", sku="KIT-0001"), "ok"]
    )
    agent = Agent(
        model,
        TOOLS,
        AgentConfig(system_prompt="sys"),
        context_policy=LayeredContextPolicy(top_n=3),
    )
    events = list(agent.run(agent.start("Order A1001?")))
    ctx = [e.data["context"] for e in events if e.type == MODEL_CALLED]
    assert ctx[1]["budget"] == 16000 and 0 < ctx[1]["tokens"] < 16000
    layers = {layer["layer"]: layer for layer in ctx[1]["layers"]}
    assert list(layers) == ["system", "task", "facts", "summary", "window"]
    assert layers["window"]["messages"] == 2 and layers["facts"]["items"] >= 3
    # nothing compacted yet: every fact is in view, the memory message is not sent
    assert layers["facts"]["sent"] is False and ctx[1]["messages"] == [0, 1, 2, 3]
    assert (
        sum(layer["tokens"] for layer in ctx[1]["layers"]) + ctx[1]["tools"]["tokens"]
        == (ctx[1]["tokens"])
    )
    # the get_order result is digested at the third call: from then on the facts are sent
    layers = {layer["layer"]: layer for layer in ctx[2]["layers"]}
    assert layers["facts"]["sent"] is True and layers["facts"]["tokens"] > 0
    assert layers["window"]["digests"] == 1
    assert ctx[2]["messages"] == [0, 1, None, 2, 3, 4, 5]  # None: the memory message
    assert len(ctx[1]["tools"]["offered"]) == 4  # 3 ranked + the used get_order
    json.dumps(ctx)
    model = ScriptedModel(["ok"])
    agent = Agent(model, TOOLS, AgentConfig(system_prompt="sys"))
    events = list(agent.run(agent.start("hi")))
    assert "context" not in next(e.data for e in events if e.type == MODEL_CALLED)


def test_a_third_party_policy_returning_three_fields_still_works() -> None:
    class Plain(ContextPolicy):
        def prepare(self, state: LoopState, registry: ToolRegistry) -> PreparedContext:
            return PreparedContext(state.messages[-1:], [], [])

    model = ScriptedModel(["ok"])
    agent = Agent(model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=Plain())
    list(agent.run(agent.start("hi")))
    assert [m.content for m in model.requests[0].messages] == ["hi"]


def test_state_with_memory_round_trips_and_old_states_still_load() -> None:
    model = ScriptedModel([call("get_order", order_id="A1001"), "ok"])
    agent = Agent(
        model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=LayeredContextPolicy()
    )
    state = agent.start("Order A1001?")
    list(agent.run(state))
    data = json.loads(json.dumps(state.to_json()))
    again = LoopState.from_json(data)
    assert again.memory == state.memory and again.memory["context"]["facts"]["order_id"] == [
        "A1001"
    ]
    assert again.to_json() == state.to_json()
    data.pop("memory")
    assert LoopState.from_json(data).memory == {}


def test_token_counts() -> None:
    counter = EstimateCounter()
    assert (
        counter.count_text("") == 0
        and counter.count_text("abcd") == 1
        and counter.count_text("abcde") == 2
    )
    m = AssistantMessage(
        content="abcd",
        tool_calls=[ToolCall(id="1", name="get_order", arguments={"order_id": "A1"})],
    )
    assert counter.count_message(m) > counter.count_message(AssistantMessage(content="abcd"))
    assert counter.count_tools(TOOLS.specs()) > 8 * len(TOOLS)
    exact = tiktoken_counter("gpt-4o")
    if exact is not None:  # only when tiktoken and its encoding are on this machine
        assert exact.count_text("hello world") == 2


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        LayeredContextPolicy(0)
    with pytest.raises(ValueError):
        LayeredContextPolicy(top_n=0)
    with pytest.raises(ValueError):
        LayeredContextPolicy(compact_to=1.5)


def test_the_docs_example_of_the_layered_policy_runs() -> None:
    root = Path(__file__).resolve().parents[2]
    blocks = re.findall(r"```python\n(.*?)```", (root / "docs" / "runtime.md").read_text(), re.S)
    code = blocks[0] + blocks[1] + "\nassert agent.context_policy is policy\n"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr


def test_an_embedding_scorer_can_replace_or_blend_with_bm25() -> None:
    from agentweb.runtime.selection import BM25Scorer, EmbeddingScorer, rank_tools

    topics = ["refund money", "parcel carrier", "stock"]

    def embed(texts: list[str]) -> list[list[float]]:  # a toy embedding: topic words present
        return [
            [float(any(w in t.lower() for w in topic.split())) for topic in topics] for t in texts
        ]

    specs = TOOLS.specs()
    scorer = EmbeddingScorer(embed)
    ranked = [s.name for s, _ in rank_tools(scorer, "I want my money back", specs)]
    assert ranked[0] == "issue_refund"
    blended = EmbeddingScorer(embed, blend=BM25Scorer(), weight=0.5)
    scores = blended.scores("where is my parcel", specs)
    assert max(scores, key=lambda n: scores[n]) == "track_shipment"
    policy = LayeredContextPolicy(top_n=1, scorer=scorer)
    model = ScriptedModel(["ok"])
    agent = Agent(model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=policy)
    list(agent.run(agent.start("money back please")))
    assert [t.name for t in model.requests[0].tools] == ["issue_refund"]


def test_a_tool_error_stays_unless_a_retry_with_the_same_arguments_worked() -> None:
    attempts: dict[str, int] = {}

    @tool
    def lookup(order_id: str) -> dict[str, Any]:
        """Look up an order.

        Args:
            order_id: The order id.
        """
        attempts[order_id] = attempts.get(order_id, 0) + 1
        if order_id.startswith("X"):
            raise LookupError(f"order {order_id} not found")
        if order_id == "F1" and attempts[order_id] == 1:
            raise TimeoutError("backend busy")
        return {"order_id": order_id}

    model = ScriptedModel(
        [
            call("lookup", order_id="X1"),
            call("lookup", order_id="F1"),
            call("lookup", order_id="F1"),
            call("lookup", order_id="A1"),
            "done",
        ]
    )
    policy = LayeredContextPolicy()
    agent = Agent(
        model, ToolRegistry([lookup]), AgentConfig(system_prompt="sys"), context_policy=policy
    )
    state = agent.start("Find order X1 or F1")
    list(agent.run(state))
    errors = [m for m in state.messages if isinstance(m, ToolMessage) and m.is_error]
    assert [m.content for m in errors] == [
        "Error: LookupError: order X1 not found",
        "Error: TimeoutError: backend busy",
    ]
    last = model.requests[-1].messages
    assert_valid(last)
    seen = [m.content for m in last if isinstance(m, ToolMessage)]
    assert errors[0].content in seen  # says something: stays
    assert errors[1].content not in seen  # retried as is and it worked: superseded


def test_for_model_summarizes_with_the_model_and_spares_a_scripted_one() -> None:
    class RealLike(ScriptedModel):
        scripted = False

    real = RealLike()
    policy = LayeredContextPolicy.for_model(real, 12000, spec="openai:gpt-4o")
    assert policy.summarizer is real and policy.budget_tokens == 12000 and policy.top_n == 8
    assert policy.counter.name in ("estimate", "tiktoken:o200k_base")
    demo = ScriptedModel()
    policy = LayeredContextPolicy.for_model(demo, spec="demo")
    assert policy.summarizer is None and policy.top_n is None
    assert policy.digest_over_chars == 2000 and policy.budget_tokens == 16000
    assert LayeredContextPolicy.for_model(demo, top_n=5).top_n == 5


def test_without_summaries_evicted_steps_just_leave_and_facts_stay() -> None:
    replies: list[Any] = [call("get_order", order_id="A1001")]
    replies += [call("search_kb", query=f"returns {i}") for i in range(10)] + ["done"]
    model = ScriptedModel(replies)
    policy = LayeredContextPolicy(1400, summarize=False)
    config = AgentConfig(system_prompt="sys", max_iterations=30)
    agent = Agent(model, TOOLS, config, context_policy=policy)
    events = list(agent.run(agent.start("Where is my order?")))
    assert any("evicted" in e.data for e in events if e.type == CONTEXT_COMPACTED)
    assert not any("summarized" in e.data for e in events)
    for request in model.requests:
        assert_valid(request.messages)
        assert sent_tokens(request) <= 1400
    memory = [m.content for m in model.requests[-1].messages if isinstance(m, UserMessage)][1]
    assert "order_id: A1001" in memory and "Summary" not in memory


def test_a_turn_too_big_for_the_budget_is_digested_at_once() -> None:
    both = [call("get_order", order_id="A1001"), call("get_order", order_id="A1002")]
    model = ScriptedModel([both, "done"])
    agent = Agent(
        model,
        TOOLS,
        AgentConfig(system_prompt="sys"),
        context_policy=LayeredContextPolicy(1500, top_n=2),
    )
    events = list(agent.run(agent.start("Compare orders A1001 and A1002")))
    assert sent_tokens(model.requests[1]) <= 1500
    results = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert len(results) == 2 and all(m.content.startswith("[digest of a") for m in results)
    ctx = [e.data["context"] for e in events if e.type == MODEL_CALLED][1]
    assert ctx["over_budget"] is False


@pytest.mark.parametrize("seed", range(25))
def test_random_runs_stay_valid_and_within_budget(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    budget = rnd.choice([1500, 2500, 4000])
    choices: list[Any] = [
        lambda i: call("get_order", order_id=f"A{i}"),
        lambda i: call("search_kb", query=f"q{i}"),
        lambda i: call("get_customer", customer_id=i),  # refused arguments
        lambda i: call("get_customer", customer_id=f"C{i}"),
        lambda i: call("check_inventory", sku=f"K{i}"),
        lambda i: [
            call("track_shipment", tracking_number=f"T{i}"),
            call("get_order", order_id=f"B{i}"),
        ],
        lambda i: AssistantMessage(
            content=f"thinking {i} " * rnd.randint(1, 40),
            tool_calls=[call("check_inventory", sku=f"S{i}")],
        ),
    ]
    replies = [rnd.choice(choices)(i) for i in range(rnd.randint(10, 40))] + ["done"]
    model = ScriptedModel(replies)
    summarizer = ScriptedModel([lambda m, t: "summary " * rnd.randint(1, 400)] * 50)
    policy = LayeredContextPolicy(
        budget, summarizer=summarizer if rnd.random() < 0.5 else None, top_n=rnd.randint(1, 7)
    )
    config = AgentConfig(system_prompt="sys " * rnd.randint(1, 50), max_iterations=60)
    agent = Agent(model, TOOLS, config, context_policy=policy)
    state = agent.start("Task about order A1 for customer C1.")
    list(agent.run(state))
    assert isinstance(state.outcome, Finished), state.outcome
    for request in model.requests:
        assert_valid(request.messages)
        assert sent_tokens(request) <= budget
        assert request.tools


def test_a_failing_policy_falls_back_to_everything_instead_of_ending_the_run() -> None:
    class Broken(EstimateCounter):
        def count_tools(self, tools: Any) -> int:
            raise RuntimeError("boom")

    model = ScriptedModel([call("get_order", order_id="A1001"), "ok"])
    policy = LayeredContextPolicy(counter=Broken())
    agent = Agent(model, TOOLS, AgentConfig(system_prompt="sys"), context_policy=policy)
    state = agent.start("Order A1001?")
    events = list(agent.run(state))
    assert isinstance(state.outcome, Finished)
    assert len(model.requests[1].messages) == 4 and len(model.requests[1].tools) == len(TOOLS)
    ctx = next(e.data["context"] for e in events if e.type == MODEL_CALLED)
    assert ctx["error"] == "RuntimeError: boom"
