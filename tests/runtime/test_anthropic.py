"""The Anthropic Messages adapter over real localhost HTTP against the fake server."""

import pytest

from agentweb.runtime.gateway import ModelAuthError, ModelHTTPError, ToolSpec
from agentweb.runtime.messages import (
    AssistantMessage,
    Attachment,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from tests.fakes.llm_server import Reply, an_reply, an_stream

SPEC = ToolSpec("get_order", "Look up an order.", {"type": "object", "properties": {}})


def test_it_sends_the_messages_wire_format(fake_llm, anthropic_model):
    fake_llm.enqueue(an_reply("Sure."))
    history = [
        SystemMessage(content="Be brief."),
        UserMessage(content="look", attachments=[Attachment(media_type="image/jpeg", data="AAA=")]),
        AssistantMessage(
            content="Checking.",
            tool_calls=[
                ToolCall(id="toolu_1", name="get_order", arguments={"order_id": "A1"}),
                ToolCall(id="toolu_2", name="get_order", arguments={"order_id": "A2"}),
            ],
        ),
        ToolMessage(call_id="toolu_1", name="get_order", content="shipped"),
        ToolMessage(call_id="toolu_2", name="get_order", content="nope", is_error=True),
        UserMessage(content="and?"),
    ]
    r = anthropic_model.complete(history, [SPEC])
    assert r.message.content == "Sure."
    req = fake_llm.requests[0]
    assert req.path == "/v1/messages"
    assert req.headers["x-api-key"] == "test-key"
    assert req.headers["anthropic-version"] == "2023-06-01"
    body = req.json
    assert body["system"] == "Be brief." and body["max_tokens"] == 4096
    assert body["tools"] == [
        {"name": "get_order", "description": "Look up an order.", "input_schema": SPEC.parameters}
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAA="},
                },
                {"type": "text", "text": "look"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_order",
                    "input": {"order_id": "A1"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "get_order",
                    "input": {"order_id": "A2"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "nope",
                    "is_error": True,
                },
                {"type": "text", "text": "and?"},
            ],
        },
    ]


def test_it_parses_tool_use_thinking_and_usage(fake_llm, anthropic_model):
    fake_llm.enqueue(
        an_reply(
            "Let me check.",
            [("toolu_9", "get_order", {"order_id": "A9"})],
            thinking="hmm",
            usage=(30, 8),
        )
    )
    r = anthropic_model.complete([UserMessage(content="x")], [SPEC])
    assert r.message.content == "Let me check."
    assert r.message.reasoning == "hmm"
    assert [(c.id, c.name, c.arguments) for c in r.message.tool_calls] == [
        ("toolu_9", "get_order", {"order_id": "A9"})
    ]
    assert (r.usage.input_tokens, r.usage.output_tokens) == (30, 8)
    assert r.finish_reason == "tool_use" and r.model == "claude-fake"


def test_it_streams_text_thinking_and_split_tool_input(fake_llm, anthropic_model):
    fake_llm.enqueue(
        Reply(
            sse=an_stream(
                "On it.",
                [("toolu_1", "get_order", '{"order_id": "A1"}'), ("toolu_2", "get_order", "")],
                thinking="private",
                usage=(21, 13),
            ),
            done=False,
        )
    )
    deltas: list[str] = []
    r = anthropic_model.stream([UserMessage(content="x")], [SPEC], on_delta=deltas.append)
    assert r.message.content == "On it." and "".join(deltas) == "On it."
    assert r.message.reasoning == "private"
    assert [(c.id, c.arguments) for c in r.message.tool_calls] == [
        ("toolu_1", {"order_id": "A1"}),
        ("toolu_2", {}),
    ]
    assert (r.usage.input_tokens, r.usage.output_tokens) == (21, 13)
    assert fake_llm.requests[0].json["stream"] is True


def test_a_stream_error_event_is_a_model_error(fake_llm, anthropic_model):
    events = an_stream("partial")[:3] + [
        "event: error\n"
        'data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
        "\n\n"
    ]
    fake_llm.enqueue(Reply(sse=events, done=False))
    with pytest.raises(ModelHTTPError, match="Overloaded"):
        anthropic_model.stream([UserMessage(content="x")], [])


def test_it_retries_overloaded_529(fake_llm, anthropic_model):
    fake_llm.enqueue(
        Reply(
            status=529,
            json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
        an_reply("ok"),
    )
    assert anthropic_model.complete([UserMessage(content="x")], []).message.content == "ok"


def test_an_auth_failure_names_the_provider(fake_llm, anthropic_model):
    fake_llm.enqueue(
        Reply(
            status=401,
            json={
                "type": "error",
                "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            },
        )
    )
    with pytest.raises(
        ModelAuthError, match=r"^anthropic: authentication failed \(HTTP 401\).*invalid x-api-key"
    ):
        anthropic_model.complete([UserMessage(content="x")], [])
