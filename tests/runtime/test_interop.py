"""Reply shapes real providers send (issue 14), replayed through the whole runtime against
the fake server over real localhost HTTP: OpenAI-compatible and Anthropic, blocking and
streaming. Each case checks what ran, what the model was told and what the events say."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentweb.runtime import Agent, AgentConfig, Failed, Finished, ToolRegistry, tool
from agentweb.runtime.anthropic import AnthropicModel
from agentweb.runtime.loop import TRUNCATED_MARK
from agentweb.runtime.openai import OpenAIChatModel
from agentweb.runtime.parsing import json_complete
from tests.fakes.llm_server import (
    FakeLLMServer,
    Reply,
    an_error_event,
    an_reply,
    an_stream,
    oa_call,
    oa_call_chunks,
    oa_chunk,
    oa_reply,
    oa_text_chunks,
)

from .conftest import fast_provider

RAN: list[tuple[str, dict[str, Any]]] = []


@tool
def get_order(order_id: str) -> dict:
    """Look up an order."""
    RAN.append(("get_order", {"order_id": order_id}))
    return {"order_id": order_id, "status": "shipped"}


@tool
def track_shipment(tracking_number: str) -> dict:
    """Track a shipment."""
    RAN.append(("track_shipment", {"tracking_number": tracking_number}))
    return {"tracking_number": tracking_number, "where": "depot"}


@tool
def list_open(limit: int = 5) -> list:
    """List open items."""
    RAN.append(("list_open", {"limit": limit}))
    return ["I1", "I2"][:limit]


@tool(risk="high")
def cancel_order(order_id: str, reason: str) -> str:
    """Cancel an order."""
    RAN.append(("cancel_order", {"order_id": order_id}))
    return "cancelled"


TOOLS = ToolRegistry([get_order, track_shipment, list_open, cancel_order])
MODES = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
STREAMING = pytest.mark.parametrize(
    "wire", [("openai", True), ("anthropic", True)], indirect=True, ids=["openai", "anthropic"]
)


class Wire:
    """Builds one provider's reply in blocking or streaming form."""

    def __init__(self, kind: str, stream: bool) -> None:
        self.kind, self.stream = kind, stream

    def reply(
        self,
        text: str | None = None,
        calls: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
        *,
        cut: bool = False,
    ) -> Reply:
        calls = list(calls)
        if self.kind == "openai":
            finish = "length" if cut else ("tool_calls" if calls else "stop")
            if not self.stream:
                wire_calls = [oa_call(i, n, a) for i, n, a in calls]
                return Reply(json=oa_reply(text, wire_calls or None, finish_reason=finish))
            chunks = oa_text_chunks(text)[:-1] if text else []
            chunks += oa_call_chunks(calls, finish_reason=None) if calls else []
            return Reply(sse=[*chunks, oa_chunk({}, finish)])
        stop = "max_tokens" if cut else None
        if not self.stream:
            uses = [(i, n, {"_": k}) for k, (i, n, _) in enumerate(calls)]
            body = json.dumps(an_reply(text, uses or None, stop_reason=stop))
            for k, (_, _, a) in enumerate(calls):  # the input as sent, however deep
                body = body.replace(json.dumps({"_": k}), a if json_complete(a) else "{}")
            return Reply(body=body.encode())
        return Reply(sse=an_stream(text, calls or None, stop_reason=stop), done=False)

    def sent_messages(self, server: FakeLLMServer, n: int) -> list[dict[str, Any]]:
        return server.requests[n].json["messages"]

    def tool_results(self, server: FakeLLMServer, n: int) -> dict[str, str]:
        """call id → the tool result text sent in request ``n``."""
        out: dict[str, str] = {}
        for m in self.sent_messages(server, n):
            if self.kind == "openai" and m["role"] == "tool":
                out[m["tool_call_id"]] = m["content"]
            elif (
                self.kind == "anthropic" and m["role"] == "user" and isinstance(m["content"], list)
            ):
                for b in m["content"]:
                    if b.get("type") == "tool_result":
                        out[b["tool_use_id"]] = b["content"]
        return out

    def last_user_text(self, server: FakeLLMServer, n: int) -> str:
        last = self.sent_messages(server, n)[-1]
        assert last["role"] == "user"
        content = last["content"]
        if isinstance(content, str):
            return content
        return " ".join(b.get("text", "") for b in content if b.get("type") == "text")


@pytest.fixture(params=MODES, ids=[f"{k}-{'stream' if s else 'blocking'}" for k, s in MODES])
def wire(request):
    return Wire(*request.param)


@pytest.fixture
def model(fake_llm, wire):
    if wire.kind == "openai":
        provider = fast_provider("openai", fake_llm.openai_url)
        yield OpenAIChatModel("fake-model", provider)
    else:
        provider = fast_provider("anthropic", fake_llm.base_url)
        yield AnthropicModel("claude-fake", provider)
    provider.close()


def run(model, wire, **cfg):
    RAN.clear()
    deltas: list[str] = []
    agent = Agent(model, TOOLS, AgentConfig(system_prompt="Help.", stream=wire.stream, **cfg))
    state = agent.start("Where is A1?")
    it = agent.run(state, on_delta=deltas.append)
    events = list(it)
    return events, it.outcome, state, deltas


def of(events, kind):
    return [e.data for e in events if e.type == kind]


# 1. A call with no arguments is dispatched with {}, never dropped


def test_a_call_without_arguments_runs_with_the_tools_defaults(fake_llm, model, wire):
    fake_llm.enqueue(wire.reply(None, [("c1", "list_open", "")]), wire.reply("Two open."))
    events, outcome, _, _ = run(model, wire)
    assert RAN == [("list_open", {"limit": 5})]
    assert outcome == Finished("Two open.", "model")
    assert of(events, "tool_call_started")[0]["arguments"] == {"limit": 5}


# 2. A reply cut off inside a tool call: the partial call never runs; the model is told


def test_a_reply_cut_off_inside_a_call_runs_only_the_whole_calls(fake_llm, model, wire):
    fake_llm.enqueue(
        wire.reply(
            "Looking.",
            [("c1", "get_order", '{"order_id": "A1"}'), ("c2", "cancel_order", '{"order_id": "A')],
            cut=True,
        ),
        wire.reply("A1 has shipped."),
    )
    events, outcome, state, _ = run(model, wire)
    assert RAN == [("get_order", {"order_id": "A1"})]  # cancel_order never ran
    assert outcome == Finished("A1 has shipped.", "model")  # and asked no one to approve it
    assert of(events, "approval_requested") == []
    results = wire.tool_results(fake_llm, 1)
    assert "shipped" in results["c1"] and "cut off" in results["c2"]
    called = of(events, "model_called")[0]
    assert called["cut_off"] is True and called["finish_reason"] in ("length", "max_tokens")
    assert [c.get("cut_off", False) for c in called["tool_calls"]] == [False, True]
    finished = [d for d in of(events, "tool_call_finished")]
    assert [d["call_id"] for d in finished] == ["c1"]


def test_a_reply_cut_off_right_after_the_call_name_runs_nothing(fake_llm, model, wire):
    fake_llm.enqueue(wire.reply(None, [("c1", "list_open", "")], cut=True), wire.reply("Done."))
    events, outcome, _, _ = run(model, wire)
    assert RAN == [] and outcome == Finished("Done.", "model")
    assert "cut off" in wire.tool_results(fake_llm, 1)["c1"]


@pytest.mark.parametrize(
    ("cut_text", "told_by"),
    [
        ("<tool_call>\n<function=get_order>\n<parameter=order_id>\nA1", "tool result"),
        ('Checking.\n<tool_call>{"name": "get_order", "argu', "user message"),
    ],
)
def test_a_written_out_call_cut_off_runs_nothing_and_is_not_the_answer(
    fake_llm, model, wire, cut_text, told_by
):
    fake_llm.enqueue(wire.reply(cut_text, cut=True), wire.reply("Sorry, A1 shipped."))
    events, outcome, _, _ = run(model, wire)
    assert RAN == [] and outcome == Finished("Sorry, A1 shipped.", "model")
    if told_by == "tool result":  # the parsed (partial) call gets the notice as its result
        assert ["cut off" in r for r in wire.tool_results(fake_llm, 1).values()] == [True]
    else:
        assert "cut off" in wire.last_user_text(fake_llm, 1)
    assert of(events, "model_called")[0]["cut_off"] is True


# 3. An error inside a stream after some deltas: partial calls discarded, nothing runs


@STREAMING
def test_an_error_inside_a_stream_fails_the_step_with_the_providers_message(fake_llm, model, wire):
    if wire.kind == "openai":
        chunks = oa_call_chunks([("c1", "get_order", '{"order_id": "A1"}')], finish_reason=None)
        err = {"error": {"message": "Provider disconnected"}, "choices": []}
        fake_llm.enqueue(Reply(sse=[*chunks[:-1], err]))
    else:
        events = an_stream("Checking.", [("c1", "get_order", '{"order_id": "A1"}')])
        stop = max(i for i, e in enumerate(events) if "content_block_stop" in e)
        fake_llm.enqueue(Reply(sse=[*events[:stop], an_error_event("Provider disconnected")]))
    events, outcome, _, deltas = run(model, wire)
    assert RAN == [] and of(events, "tool_call_started") == []
    assert isinstance(outcome, Failed) and "Provider disconnected" in outcome.reason
    assert len(fake_llm.requests) == 1


@STREAMING
def test_a_stream_closed_inside_a_call_runs_nothing(fake_llm, model, wire):
    whole = wire.reply(None, [("c1", "get_order", '{"order_id": "A1"}')])
    assert whole.sse is not None
    part = [e for e in whole.sse if "content_block_stop" not in str(e)][:-3]
    fake_llm.enqueue(Reply(sse=part, done=False))
    events, outcome, _, _ = run(model, wire)
    assert RAN == [] and isinstance(outcome, Failed) and "tool call" in outcome.reason


# 4. Namespace prefixes resolve when the rest is exactly one registered tool


@pytest.mark.parametrize(
    "name", ["functions.get_order", "default_api:get_order", "tools/get_order"]
)
def test_a_namespaced_tool_name_runs_that_tool(fake_llm, model, wire, name):
    fake_llm.enqueue(wire.reply(None, [("c1", name, '{"order_id": "A1"}')]), wire.reply("Shipped."))
    events, outcome, _, _ = run(model, wire)
    assert RAN == [("get_order", {"order_id": "A1"})] and outcome == Finished("Shipped.", "model")
    assert of(events, "model_called")[0]["tool_calls"][0]["name"] == "get_order"


def test_a_prefix_over_an_unknown_tool_is_still_unknown(fake_llm, model, wire):
    fake_llm.enqueue(wire.reply(None, [("c1", "functions.launch", "{}")]), wire.reply("Ok."))
    run(model, wire)
    assert RAN == [] and "Unknown tool 'functions.launch'" in wire.tool_results(fake_llm, 1)["c1"]


# 5 + 6. Calls written into the text: Qwen3-Coder XML and Llama "pythonic"


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n<function=get_order>\n<parameter=order_id>\nA1001\n</parameter>\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=track_shipment>\n"
        "<parameter=tracking_number>\n1Z9\n</parameter>\n</function>\n</tool_call>",
        '[get_order(order_id="A1001"), track_shipment(tracking_number="1Z9")]',
    ],
    ids=["qwen-xml", "pythonic"],
)
def test_calls_written_into_the_text_run(fake_llm, model, wire, text):
    fake_llm.enqueue(wire.reply(text), wire.reply("A1001 is at the depot."))
    events, outcome, _, _ = run(model, wire)
    assert RAN == [
        ("get_order", {"order_id": "A1001"}),
        ("track_shipment", {"tracking_number": "1Z9"}),
    ]
    assert outcome == Finished("A1001 is at the depot.", "model")
    assert of(events, "model_called")[0]["text"] == ""


def test_a_tool_named_in_prose_is_the_answer_not_a_call(fake_llm, model, wire):
    text = "I checked with get_order(order_id) and it shipped; track_shipment has no news."
    fake_llm.enqueue(wire.reply(text))
    _, outcome, _, _ = run(model, wire)
    assert RAN == [] and outcome == Finished(text, "model")


# Issue 12 point 7: empty replies, deep nesting, the reply cap


def test_empty_replies_stop_the_run_after_three_in_a_row(fake_llm, model, wire):
    fake_llm.enqueue(*[wire.reply(None) for _ in range(5)])
    events, outcome, state, _ = run(model, wire, max_iterations=40)
    assert len(fake_llm.requests) == 3
    assert isinstance(outcome, Failed) and "3 empty replies in a row" in outcome.reason


def test_an_answer_between_empty_replies_resets_the_count(fake_llm, model, wire):
    fake_llm.enqueue(
        wire.reply(None),
        wire.reply(None),
        wire.reply(None, [("c1", "get_order", '{"order_id": "A1"}')]),
        wire.reply(None),
        wire.reply(None),
        wire.reply("Shipped."),
    )
    _, outcome, _, _ = run(model, wire)
    assert outcome == Finished("Shipped.", "model") and len(fake_llm.requests) == 6


def test_deeply_nested_arguments_get_an_error_result_and_the_run_goes_on(fake_llm, model, wire):
    deep = '{"a": ' * 1_200 + "1" + "}" * 1_200
    fake_llm.enqueue(wire.reply(None, [("c1", "get_order", deep)]), wire.reply("Could not."))
    events, outcome, _, _ = run(model, wire)
    assert RAN == [] and outcome == Finished("Could not.", "model")
    assert "nested more than" in wire.tool_results(fake_llm, 1)["c1"]


def test_a_long_reply_is_cut_at_the_cap_and_the_run_succeeds(fake_llm, model, wire):
    text = "word " * 2_000  # 10,000 characters
    fake_llm.enqueue(wire.reply(text))
    events, outcome, state, deltas = run(model, wire, max_reply_chars=1_000)
    assert isinstance(outcome, Finished)
    assert outcome.answer == text.strip()[:1_000] + TRUNCATED_MARK
    assert of(events, "run_finished")[0]["truncated"] is True
    called = of(events, "model_called")[0]
    assert called["truncated"] is True and len(called["text"]) < 1_100
    if wire.stream:
        assert 0 < len("".join(deltas)) <= 1_000  # the live preview stops at the cap too


def test_a_short_reply_is_not_marked_truncated(fake_llm, model, wire):
    fake_llm.enqueue(wire.reply("Fine."))
    events, _, _, _ = run(model, wire, max_reply_chars=1_000)
    assert "truncated" not in of(events, "run_finished")[0]
    assert "truncated" not in of(events, "model_called")[0]
