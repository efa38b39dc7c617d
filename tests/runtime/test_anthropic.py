"""The Anthropic Messages adapter over real localhost HTTP against the fake server."""

import json

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
from agentweb.runtime.parsing import parse_arguments
from tests.fakes.llm_server import Reply, an_error_event, an_reply, an_stream

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


# -- reply shapes from real providers (issue 14) ------------------------------------------

X = [UserMessage(content="x")]


def test_a_streamed_tool_use_without_input_deltas_is_a_call_with_no_arguments(
    fake_llm, anthropic_model
):
    fake_llm.enqueue(
        Reply(
            sse=an_stream(None, [("toolu_1", "get_order", "")], no_input_deltas=True),
            done=False,
        ),
        Reply(sse=an_stream(None, [("toolu_2", "get_order", "")]), done=False),  # "" deltas
    )
    for call_id in ("toolu_1", "toolu_2"):
        r = anthropic_model.stream(X, [SPEC])
        assert [(c.id, c.name, c.arguments) for c in r.message.tool_calls] == [
            (call_id, "get_order", {})
        ]
        assert r.incomplete_calls == []


def test_a_blocking_tool_use_with_empty_or_null_input_is_a_call(fake_llm, anthropic_model):
    body = an_reply(None, [("toolu_1", "get_order", {})])
    body["content"].append({"type": "tool_use", "id": "toolu_2", "name": "get_order"})
    fake_llm.enqueue(body)
    r = anthropic_model.complete(X, [SPEC])
    assert [(c.id, c.arguments) for c in r.message.tool_calls] == [
        ("toolu_1", {}),
        ("toolu_2", {}),
    ]


def test_max_tokens_inside_a_tool_use_keeps_that_call_out_blocking(fake_llm, anthropic_model):
    fake_llm.enqueue(
        an_reply(
            "Checking.",
            [("toolu_1", "get_order", {"order_id": "A1"}), ("toolu_2", "get_order", {})],
            stop_reason="max_tokens",
        ),
        an_reply("A long answer that was cut", stop_reason="max_tokens"),
    )
    r = anthropic_model.complete(X, [SPEC])
    assert r.cut_off and r.finish_reason == "max_tokens"
    assert [c.id for c in r.message.tool_calls] == ["toolu_1"]
    assert [c.id for c in r.incomplete_calls] == ["toolu_2"]
    r = anthropic_model.complete(X, [SPEC])  # text only: nothing to hold back
    assert r.cut_off and r.incomplete_calls == [] and r.message.content.startswith("A long")


@pytest.mark.parametrize("partial", ['{"order_id": "A', ""])
def test_max_tokens_inside_a_tool_use_keeps_that_call_out_streaming(
    fake_llm, anthropic_model, partial
):
    events = an_stream(
        "Checking.",
        [("toolu_1", "get_order", '{"order_id": "A1"}'), ("toolu_2", "get_order", partial)],
        stop_reason="max_tokens",
    )
    fake_llm.enqueue(Reply(sse=events, done=False))
    r = anthropic_model.stream(X, [SPEC])
    assert r.cut_off
    assert [(c.id, c.arguments) for c in r.message.tool_calls] == [("toolu_1", {"order_id": "A1"})]
    assert [(c.id, c.arguments, c.raw_arguments) for c in r.incomplete_calls] == [
        ("toolu_2", {}, partial)
    ]


def test_an_error_event_after_tool_input_deltas_is_a_model_error(fake_llm, anthropic_model):
    events = an_stream(None, [("toolu_1", "get_order", '{"order_id": "A1"}')])
    cut = next(i for i, e in enumerate(events) if "content_block_stop" in e)
    fake_llm.enqueue(Reply(sse=[*events[:cut], an_error_event("Overloaded")], done=False))
    with pytest.raises(ModelHTTPError, match="Overloaded"):
        anthropic_model.stream(X, [SPEC])
    assert len(fake_llm.requests) == 1


def test_a_stream_closed_inside_a_tool_use_is_a_model_error(fake_llm, anthropic_model):
    events = an_stream(None, [("toolu_1", "get_order", '{"order_id": "A1"}')])
    cut = next(i for i, e in enumerate(events) if "content_block_stop" in e)
    fake_llm.enqueue(Reply(sse=events[:cut], done=False))  # the server closed cleanly
    with pytest.raises(ModelHTTPError, match="ended inside a tool call"):
        anthropic_model.stream(X, [SPEC])
    fake_llm.enqueue(Reply(sse=events, cut_after=cut))  # the connection was reset
    with pytest.raises(ModelHTTPError, match="stream broke"):
        anthropic_model.stream(X, [SPEC])


def test_a_stream_without_message_stop_but_with_whole_text_is_kept(fake_llm, anthropic_model):
    events = an_stream("All done.")
    fake_llm.enqueue(Reply(sse=events[:-2], done=False))  # no message_delta / message_stop
    assert anthropic_model.stream(X, []).message.content == "All done."


def test_deeply_nested_tool_input_is_an_error_not_a_crash(fake_llm, anthropic_model):
    deep = '{"a": ' * 1_500 + "1" + "}" * 1_500
    fake_llm.enqueue(Reply(sse=an_stream(None, [("toolu_1", "get_order", deep)], split=400)))
    r = anthropic_model.stream(X, [SPEC])
    assert r.message.tool_calls[0].arguments == {} and r.message.tool_calls[0].raw_arguments
    body = json.dumps(an_reply(None, [("toolu_2", "get_order", {})])).replace(
        '"input": {}', f'"input": {deep}'
    )
    fake_llm.enqueue(Reply(body=body.encode()))  # too deep for json.loads: read pruned
    r = anthropic_model.complete(X, [SPEC])
    call = r.message.tool_calls[0]
    assert (call.id, call.arguments) == ("toolu_2", {})
    assert "nested more than 64" in parse_arguments(call.raw_arguments).error
