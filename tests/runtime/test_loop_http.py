"""The whole runtime against the fake servers over real localhost HTTP."""

import json

from agentweb.runtime import Agent, AgentConfig, Finished, NeedsApproval, ToolRegistry, tool
from tests.fakes.llm_server import Reply, an_reply, an_stream, oa_call, oa_chunk, oa_reply

SEEN: list[tuple[str, str]] = []


@tool
def get_order(order_id: str) -> dict:
    """Look up an order."""
    SEEN.append(("get_order", order_id))
    return {"order_id": order_id, "status": "shipped"}


@tool(risk="high")
def cancel_order(order_id: str, reason: str) -> str:
    """Cancel an order."""
    SEEN.append(("cancel_order", order_id))
    return "cancelled"


TOOLS = ToolRegistry([get_order, cancel_order])


def run(model, **cfg):
    SEEN.clear()
    agent = Agent(model, TOOLS, AgentConfig(system_prompt="Help.", **cfg))
    state = agent.start("Where is A1?")
    it = agent.run(state)
    events = list(it)
    return events, it.outcome, state


def test_native_calls_with_quirks_end_to_end(fake_llm, openai_model):
    fake_llm.enqueue(
        oa_reply(None, [oa_call("c1", "get_order", '{"OrderId": "A1",}')], finish_reason="stop"),
        oa_reply(None, [oa_call("c2", "ship_it", "{}")]),
        oa_reply("<think>done</think>A1 has shipped."),
    )
    events, outcome, state = run(openai_model)
    assert outcome == Finished("A1 has shipped.", "model")
    assert SEEN == [("get_order", "A1")]
    started = [e.data for e in events if e.type == "tool_call_started"][0]
    assert started["repaired"] == {"OrderId": "order_id"}
    third = fake_llm.requests[2].json["messages"]
    assert third[-1]["tool_call_id"] == "c2" and "Unknown tool 'ship_it'" in third[-1]["content"]
    assert (
        third[-3]["tool_call_id"] == "c1"
        and json.loads(third[-3]["content"])["status"] == "shipped"
    )
    assert state.usage.input_tokens == 30
    called = [e.data for e in events if e.type == "model_called"]
    assert called[2]["reasoning"] == "done" and called[0]["tokens"] == {"input": 10, "output": 5}


def test_code_block_and_react_calls_end_to_end(fake_llm, openai_model):
    fake_llm.enqueue(
        oa_reply('Checking.\n```json\n{"name": "get_order", "arguments": {"order_id": "A1"}}\n```'),
        oa_reply('Thought: and B2\nAction: get_order\nAction Input: {"order_id": "B2"}'),
        oa_reply("Both shipped."),
    )
    events, outcome, _ = run(openai_model)
    assert SEEN == [("get_order", "A1"), ("get_order", "B2")]
    assert outcome == Finished("Both shipped.", "model")
    # the parsed calls go back to the server as native calls with their results
    msgs = fake_llm.requests[1].json["messages"]
    assert msgs[-2]["tool_calls"][0]["function"]["name"] == "get_order"
    assert msgs[-1]["tool_call_id"] == msgs[-2]["tool_calls"][0]["id"]


def test_malformed_arguments_for_a_risky_tool_pause_the_run(fake_llm, openai_model):
    fake_llm.enqueue(oa_reply(None, [oa_call("c1", "cancel_order", '{"order_id": "A1", reason')]))
    events, outcome, state = run(openai_model)
    assert isinstance(outcome, NeedsApproval) and outcome.calls[0].reason == "malformed_arguments"
    assert SEEN == [] and state.status == "waiting_approval"


def test_a_streamed_run_end_to_end(fake_llm, openai_model):
    fake_llm.enqueue(
        Reply(
            sse=[
                oa_chunk(
                    {"tool_calls": [{"index": 0, "id": "s1", "function": {"name": "get_order"}}]}
                ),
                oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"order_id"'}}]}),
                oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "A1"}'}}]}),
                oa_chunk({}, "tool_calls"),
            ]
        ),
        Reply(sse=[oa_chunk({"content": "Shipped"}), oa_chunk({"content": "."}, "stop")]),
    )
    events, outcome, _ = run(openai_model, stream=True)
    assert SEEN == [("get_order", "A1")] and outcome == Finished("Shipped.", "model")


def test_anthropic_end_to_end_blocking_and_streaming(fake_llm, anthropic_model):
    fake_llm.enqueue(
        an_reply("Looking.", [("toolu_1", "get_order", {"order_id": "A1"})]),
        an_reply("It shipped."),
    )
    _, outcome, _ = run(anthropic_model)
    assert outcome == Finished("It shipped.", "model") and SEEN == [("get_order", "A1")]
    second = fake_llm.requests[1].json["messages"]
    assert second[-1]["content"][0]["tool_use_id"] == "toolu_1"
    fake_llm.enqueue(
        Reply(sse=an_stream(None, [("toolu_2", "get_order", '{"order_id": "B2"}')]), done=False),
        Reply(sse=an_stream("Done."), done=False),
    )
    _, outcome, _ = run(anthropic_model, stream=True)
    assert outcome == Finished("Done.", "model") and SEEN == [("get_order", "B2")]


def test_a_server_without_tool_support_gets_tools_as_text(fake_llm, openai_model):
    fake_llm.enqueue(
        Reply(status=400, json={"error": {"message": "fake-model does not support tools"}}),
        oa_reply('<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>'),
        oa_reply("A1 shipped."),
    )
    events, outcome, _ = run(openai_model)
    assert outcome == Finished("A1 shipped.", "model") and SEEN == [("get_order", "A1")]
    first, second, third = (r.json for r in fake_llm.requests)
    assert "tools" in first and "tools" not in second and "tools" not in third
    assert "<tool_call>" in second["messages"][0]["content"]
    assert '"name": "get_order"' in second["messages"][0]["content"]
    assert third["messages"][-2] == {
        "role": "assistant",
        "content": '<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>',
    }
    assert third["messages"][-1]["role"] == "user"
    assert third["messages"][-1]["content"].startswith('<tool_response name="get_order">')
    assert all(m["role"] != "tool" for m in third["messages"])
