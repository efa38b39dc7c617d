"""The OpenAI-compatible adapter over real localhost HTTP against the fake server."""

import json
import time

import pytest

from agentweb.runtime.gateway import (
    ModelAuthError,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    ToolSpec,
)
from agentweb.runtime.messages import (
    AssistantMessage,
    Attachment,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentweb.runtime.openai import OpenAIChatModel
from agentweb.runtime.parsing import parse_arguments
from tests.fakes.llm_server import (
    Reply,
    oa_call,
    oa_call_chunks,
    oa_chunk,
    oa_reply,
    oa_text_chunks,
    oa_usage_chunk,
)

from .conftest import fast_provider

SPEC = ToolSpec("get_order", "Look up an order.", {"type": "object", "properties": {}})
MSGS = [SystemMessage(content="sys"), UserMessage(content="hi")]


def test_it_completes_and_records_usage(fake_llm, openai_model):
    fake_llm.enqueue(oa_reply("Hello there.", usage=(11, 7)))
    r = openai_model.complete(MSGS, [SPEC])
    assert r.message.content == "Hello there." and r.message.tool_calls == []
    assert (r.usage.input_tokens, r.usage.output_tokens) == (11, 7)
    assert r.finish_reason == "stop" and r.model == "fake-model" and r.latency_ms > 0
    req = fake_llm.requests[0]
    assert req.path == "/v1/chat/completions"
    assert req.headers["Authorization"] == "Bearer test-key"
    assert req.json["model"] == "fake-model"
    assert req.json["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]
    assert req.json["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_order",
                "description": "Look up an order.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]


def test_it_sends_history_with_ids_verbatim_and_images(fake_llm, openai_model):
    fake_llm.enqueue(oa_reply("ok"))
    history = [
        UserMessage(content="see", attachments=[Attachment(media_type="image/png", data="AAAA")]),
        AssistantMessage(
            tool_calls=[ToolCall(id="fc_1:odd", name="get_order", arguments={"a": 1})]
        ),
        ToolMessage(call_id="fc_1:odd", name="get_order", content="res"),
    ]
    openai_model.complete(history, [])
    sent = fake_llm.requests[0].json["messages"]
    assert sent[0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AAAA"},
    }
    assert sent[1]["tool_calls"][0]["id"] == "fc_1:odd"
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"a": 1}
    assert sent[2] == {"role": "tool", "tool_call_id": "fc_1:odd", "content": "res"}
    assert "tools" not in fake_llm.requests[0].json


def test_it_parses_tool_calls_in_every_argument_shape(fake_llm, openai_model):
    fake_llm.enqueue(
        oa_reply(
            None,
            [
                oa_call("c1", "get_order", {"order_id": "A1"}),  # an object
                oa_call("c2", "get_order", ""),  # empty string
                oa_call("c3", "get_order", json.dumps(json.dumps({"order_id": "A3"}))),  # double
                oa_call("c4", "get_order", '{"order_id": "A4",}'),  # trailing comma
                oa_call("c5", "get_order", "{'order_id': 'A5'}"),  # single quotes
                oa_call("c6", "get_order", '{"order_id": '),  # broken
            ],
            finish_reason="stop",  # "stop" although tool calls are present
        )
    )
    r = openai_model.complete(MSGS, [SPEC])
    args = [c.arguments for c in r.message.tool_calls]
    assert args == [
        {"order_id": "A1"},
        {},
        {"order_id": "A3"},
        {"order_id": "A4"},
        {"order_id": "A5"},
        {},
    ]
    assert [c.id for c in r.message.tool_calls] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert r.message.tool_calls[5].raw_arguments == '{"order_id": '
    assert r.message.tool_calls[0].raw_arguments is None


def test_it_replaces_missing_and_duplicated_ids(fake_llm, openai_model):
    fake_llm.enqueue(
        oa_reply(
            None,
            [oa_call(None, "get_order", "{}"), oa_call("d", "a", "{}"), oa_call("d", "b", "{}")],
        )
    )
    ids = [c.id for c in openai_model.complete(MSGS, [SPEC]).message.tool_calls]
    assert ids[1] == "d" and ids[0] and ids[2] not in ("d", "") and len(set(ids)) == 3


def test_it_keeps_reasoning_out_of_the_answer(fake_llm, openai_model):
    fake_llm.enqueue(
        oa_reply("<think>secret plan</think>\nThe answer.", reasoning_content="field thoughts"),
        oa_reply("Plain.", reasoning="other field"),
    )
    r = openai_model.complete(MSGS, [])
    assert r.message.content == "The answer."
    assert r.message.reasoning == "field thoughts\n\nsecret plan"
    r = openai_model.complete(MSGS, [])
    assert (r.message.content, r.message.reasoning) == ("Plain.", "other field")


def test_it_streams_text_and_usage(fake_llm, openai_model):
    fake_llm.enqueue(Reply(sse=[*oa_text_chunks("Hello streaming world"), oa_usage_chunk(9, 4)]))
    deltas: list[str] = []
    r = openai_model.stream(MSGS, [], on_delta=deltas.append)
    assert r.message.content == "Hello streaming world"
    assert "".join(deltas) == "Hello streaming world" and len(deltas) > 3
    assert (r.usage.input_tokens, r.usage.output_tokens) == (9, 4)
    req = fake_llm.requests[0].json
    assert req["stream"] is True and req["stream_options"] == {"include_usage": True}


def test_it_streams_over_a_kept_alive_connection(fake_llm, openai_model):
    """A provider that keeps the connection open (chunked SSE, as the real ones do): each
    reply arrives whole, and the next call works."""
    fake_llm.enqueue(
        Reply(sse=[*oa_text_chunks("First answer"), oa_usage_chunk(9, 4)], keep_alive=True),
        Reply(sse=oa_call_chunks([("c1", "get_order", '{"order_id": "A1"}')]), keep_alive=True),
    )
    first = openai_model.stream(MSGS, [], on_delta=lambda _: None)
    second = openai_model.stream(MSGS, [SPEC], on_delta=lambda _: None)
    assert first.message.content == "First answer" and first.usage.output_tokens == 4
    assert [(c.name, c.arguments) for c in second.message.tool_calls] == [
        ("get_order", {"order_id": "A1"})
    ]
    # The first reply was read to its end after [DONE]: the second came over the same
    # connection instead of a new one.
    assert fake_llm.requests[0].peer == fake_llm.requests[1].peer != 0


@pytest.mark.parametrize("keep_alive", [False, True])
def test_only_cr_and_lf_end_a_stream_line(fake_llm, openai_model, keep_alive):
    """SSE lines end at CR, LF or CRLF, nothing else: a reply whose JSON carries a raw
    U+2028, U+2029 or U+0085 (legal unescaped in a JSON string, and sent so by providers
    that write UTF-8) stays one line; with str.splitlines rules it was cut in two and
    the chunk's text was dropped as not JSON."""
    odd = "line\u2028sep, para\u2029sep, next\x85line"
    text_chunks = oa_text_chunks(odd, size=9)
    raw = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in text_chunks]
    ends = ["\r\n\r\n", "\r\r", "\n\n"]  # every SSE line end, in turns
    raw = [r.removesuffix("\n\n") + ends[i % 3] for i, r in enumerate(raw)]
    fake_llm.enqueue(
        Reply(
            sse=[*raw, f"data: {json.dumps(oa_usage_chunk(3, 2))}\r\n\r\n"], keep_alive=keep_alive
        )
    )
    deltas: list[str] = []
    r = openai_model.stream(MSGS, [], on_delta=deltas.append)
    assert r.message.content == odd
    assert "".join(deltas) == odd
    assert r.usage.output_tokens == 2


def test_stream_lines_do_not_depend_on_where_the_network_cut_the_body():
    from agentweb.runtime.providers import stream_lines

    body = 'data: {"t": "é\u2028€"}\r\n\r\ndata: x\rdata: y\n\n: note\r\nlast'.encode()
    expected = ['data: {"t": "é\u2028€"}', "", "data: x", "data: y", "", ": note", "last"]
    assert list(stream_lines([body])) == expected
    assert list(stream_lines([bytes([b]) for b in body])) == expected  # a byte at a time
    for cut in range(1, len(body)):  # inside a CRLF, inside a UTF-8 character ...
        assert list(stream_lines([body[:cut], body[cut:]])) == expected, cut
    assert list(stream_lines([b"a\r"])) == ["a"]  # a CR at the very end ends the line
    assert list(stream_lines([b"a\n", b""])) == ["a"]


def test_it_joins_a_tool_call_split_across_chunks(fake_llm, openai_model):
    chunks = [
        oa_chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_x",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": ""},
                    }
                ],
            }
        ),
        oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"order'}}]}),
        oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '_id": "A'}}]}),
        oa_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '1"}'}}]}),
        oa_chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_y",
                        "function": {"name": "search_kb", "arguments": '{"query"'},
                    }
                ]
            }
        ),
        oa_chunk({"tool_calls": [{"index": 1, "function": {"arguments": ': "x"}'}}]}),
        oa_chunk({}, "tool_calls"),
    ]
    fake_llm.enqueue(Reply(sse=chunks))
    r = openai_model.stream(MSGS, [SPEC])
    calls = [(c.id, c.name, c.arguments) for c in r.message.tool_calls]
    assert calls == [
        ("call_x", "get_order", {"order_id": "A1"}),
        ("call_y", "search_kb", {"query": "x"}),
    ]
    assert r.finish_reason == "tool_calls"


def test_it_copes_with_deltas_without_index_and_fresh_ids(fake_llm, openai_model):
    chunks = [
        oa_chunk(
            {
                "tool_calls": [
                    {"id": "f1", "function": {"name": "get_order", "arguments": '{"order_id":'}}
                ]
            }
        ),
        oa_chunk({"tool_calls": [{"id": "f2", "function": {"arguments": ' "A1"}'}}]}),
        oa_chunk(
            {
                "tool_calls": [
                    {"id": "f3", "function": {"name": "search_kb", "arguments": '{"query": "q"}'}}
                ]
            }
        ),
        oa_chunk({}, "stop"),
    ]
    fake_llm.enqueue(Reply(sse=chunks))
    r = openai_model.stream(MSGS, [SPEC])
    assert [(c.id, c.name, c.arguments) for c in r.message.tool_calls] == [
        ("f1", "get_order", {"order_id": "A1"}),
        ("f3", "search_kb", {"query": "q"}),
    ]


def test_it_copes_with_one_index_for_parallel_calls(fake_llm, openai_model):
    chunks = [
        oa_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "a",
                        "function": {"name": "get_order", "arguments": '{"order_id": "A1"}'},
                    }
                ]
            }
        ),
        oa_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "b",
                        "function": {"name": "get_order", "arguments": '{"order_id": "A2"}'},
                    }
                ]
            }
        ),
        oa_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "a",
                        "function": {"name": "get_order", "arguments": {"order_id": "A3"}},
                    }
                ]
            }
        ),
        oa_chunk({}, "tool_calls"),
    ]
    fake_llm.enqueue(Reply(sse=chunks))
    r = openai_model.stream(MSGS, [SPEC])
    assert [c.arguments["order_id"] for c in r.message.tool_calls] == ["A1", "A2", "A3"]
    ids = [c.id for c in r.message.tool_calls]
    assert ids[:2] == ["a", "b"] and len(set(ids)) == 3  # the duplicated id is replaced


def test_it_reads_lenient_sse(fake_llm, openai_model):
    raw = [
        ": keep-alive comment\n\n",
        'data:{"choices":[{"index":0,"delta":{"content":"no space"}}]}\n\n',
        "event: message\n",
        'data: {"choices":[{"index":0,"delta":{"content":" and"}}]}\n',  # no blank line
        'data: {"choices":[{"index":0,"delta":{"content":" more"}}]}\n\n',
        oa_usage_chunk(3, 2),
    ]
    fake_llm.enqueue(Reply(sse=raw, done=False))  # ends without [DONE]
    r = openai_model.stream(MSGS, [])
    assert r.message.content == "no space and more"
    assert r.usage.output_tokens == 2


def test_it_keeps_streamed_reasoning_and_think_out_of_the_answer(fake_llm, openai_model):
    chunks = [
        oa_chunk({"reasoning_content": "field reasoning "}),
        oa_chunk({"content": "<thi"}),
        oa_chunk({"content": 'nk>inner <tool_call>{"name": "get_order"}</tool_call></think>'}),
        oa_chunk({"content": "Visible answer"}),
        oa_chunk({}, "stop"),
    ]
    fake_llm.enqueue(Reply(sse=chunks))
    deltas: list[str] = []
    r = openai_model.stream(MSGS, [SPEC], on_delta=deltas.append)
    assert r.message.content == "Visible answer" and "".join(deltas) == "Visible answer"
    assert "field reasoning" in r.message.reasoning and "inner" in r.message.reasoning
    assert r.message.tool_calls == []


def test_a_mid_stream_error_is_a_model_error(fake_llm, openai_model):
    fake_llm.enqueue(
        Reply(
            sse=[oa_chunk({"content": "partial"}), {"error": {"message": "overloaded, try later"}}],
            done=False,
        )
    )
    with pytest.raises(ModelHTTPError, match="overloaded"):
        openai_model.stream(MSGS, [])


def test_an_empty_stream_is_an_error(fake_llm, openai_model):
    fake_llm.enqueue(Reply(sse=[], done=False))
    with pytest.raises(ModelHTTPError, match="without any data"):
        openai_model.stream(MSGS, [])


def test_it_retries_429_honouring_retry_after(fake_llm, openai_model):
    fake_llm.enqueue(
        Reply(status=429, json={"error": {"message": "slow down"}}, headers={"Retry-After": "0.1"}),
        oa_reply("finally"),
    )
    t0 = time.perf_counter()
    assert openai_model.complete(MSGS, []).message.content == "finally"
    assert time.perf_counter() - t0 >= 0.1
    assert len(fake_llm.requests) == 2


def test_it_retries_5xx_and_dropped_connections_then_gives_up(fake_llm, openai_model):
    fake_llm.enqueue(Reply(status=502, body=b"bad gateway"), Reply(drop=True), oa_reply("ok"))
    assert openai_model.complete(MSGS, []).message.content == "ok"
    fake_llm.enqueue(*[Reply(status=500, json={"error": {"message": "boom"}})] * 3)
    with pytest.raises(ModelHTTPError, match=r"HTTP 500: boom \(gave up after 3 attempts\)"):
        openai_model.complete(MSGS, [])
    assert len(fake_llm.requests) == 6


def test_streams_are_retried_before_the_first_event(fake_llm, openai_model):
    fake_llm.enqueue(Reply(status=503, body=b"busy"), Reply(sse=oa_text_chunks("ok")))
    assert openai_model.stream(MSGS, []).message.content == "ok"


def test_a_stalled_server_times_out(fake_llm, openai_model):
    fake_llm.enqueue(Reply(json=oa_reply("late"), delay=3.0))
    t0 = time.perf_counter()
    with pytest.raises(ModelTimeout):
        openai_model.complete(MSGS, [], timeout=0.2)
    assert time.perf_counter() - t0 < 2.0
    fake_llm.enqueue(Reply(sse=oa_text_chunks("slow"), stall_after=2, stall=3.0))
    with pytest.raises(ModelTimeout):
        openai_model.stream(MSGS, [], timeout=0.2)


def test_an_auth_failure_names_the_provider(fake_llm, openai_model):
    fake_llm.enqueue(Reply(status=401, json={"error": {"message": "Incorrect API key provided"}}))
    with pytest.raises(ModelAuthError, match=r"^openai: authentication failed \(HTTP 401\)"):
        openai_model.complete(MSGS, [])
    assert len(fake_llm.requests) == 1  # not retried


def test_it_drops_an_unsupported_parameter_and_remembers(fake_llm):
    model = OpenAIChatModel(
        "fake-model",
        fast_provider("openai", fake_llm.openai_url),
        params={"temperature": 0.2, "parallel_tool_calls": False},
    )
    fake_llm.enqueue(
        Reply(
            status=400,
            json={
                "error": {"message": "Unrecognized request argument supplied: parallel_tool_calls"}
            },
        ),
        oa_reply("fine"),
        oa_reply("again"),
    )
    assert model.complete(MSGS, []).message.content == "fine"
    assert model.complete(MSGS, []).message.content == "again"
    sent = [r.json for r in fake_llm.requests]
    assert "parallel_tool_calls" in sent[0] and "parallel_tool_calls" not in sent[1]
    assert "parallel_tool_calls" not in sent[2] and sent[2]["temperature"] == 0.2
    assert model.provider.dropped_params == {"parallel_tool_calls"}


def test_a_bad_request_that_names_no_optional_param_fails_clearly(fake_llm, openai_model):
    fake_llm.enqueue(Reply(status=400, json={"error": {"message": "messages: too long"}}))
    with pytest.raises(ModelHTTPError, match="HTTP 400: messages: too long"):
        openai_model.complete(MSGS, [])


def test_connection_refused_is_a_model_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    model = OpenAIChatModel(
        "m", fast_provider("openai", f"http://127.0.0.1:{port}/v1", max_retries=1)
    )
    with pytest.raises(ModelError, match="openai: connection failed after 2 attempts"):
        model.complete(MSGS, [])


def test_it_honours_retry_after_ms(fake_llm, openai_model):
    fake_llm.enqueue(
        Reply(status=429, json={"error": {"message": "slow"}}, headers={"retry-after-ms": "120"}),
        oa_reply("ok"),
    )
    t0 = time.perf_counter()
    assert openai_model.complete(MSGS, []).message.content == "ok"
    assert time.perf_counter() - t0 >= 0.12


def test_a_connection_dropped_mid_stream_is_a_model_error(fake_llm, openai_model):
    fake_llm.enqueue(Reply(sse=oa_text_chunks("Hello there friend"), cut_after=3))
    deltas: list[str] = []
    with pytest.raises(ModelHTTPError, match="stream broke"):
        openai_model.stream(MSGS, [], on_delta=deltas.append)
    assert deltas  # some text had arrived: not silently retried
    assert len(fake_llm.requests) == 1


def test_a_stream_that_opens_with_an_error_is_retried(fake_llm, openai_model):
    fake_llm.enqueue(
        Reply(sse=[{"error": {"message": "model is loading"}}], done=False),
        Reply(sse=oa_text_chunks("ready")),
    )
    assert openai_model.stream(MSGS, []).message.content == "ready"
    assert len(fake_llm.requests) == 2


def test_a_stream_that_keeps_opening_with_an_error_gives_up_like_a_5xx(fake_llm, openai_model):
    # max_retries=2: an error before any event counts as a failed attempt, the third
    # such stream is handed over as it is
    loading = Reply(sse=[{"error": {"message": "model is loading"}}], done=False)
    fake_llm.enqueue(Reply(status=503, body=b"busy"), loading, loading)
    with pytest.raises(ModelHTTPError, match="model is loading"):
        openai_model.stream(MSGS, [])
    assert len(fake_llm.requests) == 3


def test_a_dropped_parameter_is_not_a_failed_attempt(fake_llm):
    # max_retries=2 allows three attempts; the tries that named a parameter are extra
    model = OpenAIChatModel(
        "fake-model",
        fast_provider("openai", fake_llm.openai_url),
        params={"parallel_tool_calls": False},
    )
    busy = Reply(status=503, json={"error": {"message": "busy"}})

    def refused(param: str) -> Reply:
        return Reply(status=400, json={"error": {"message": f"unknown parameter: {param}"}})

    fake_llm.enqueue(refused("parallel_tool_calls"), busy, busy, oa_reply("fine"))
    assert model.complete(MSGS, []).message.content == "fine"
    fake_llm.enqueue(refused("stream_options"), busy, busy, Reply(sse=oa_text_chunks("streamed")))
    assert model.stream(MSGS, []).message.content == "streamed"
    sent = [r.json for r in fake_llm.requests]
    assert len(sent) == 8
    assert "parallel_tool_calls" not in sent[1] and "stream_options" not in sent[5]


# -- reply shapes from real providers (issue 14) ------------------------------------------


def test_calls_without_arguments_are_kept_blocking(fake_llm, openai_model):
    # gateways send "" (vLLM, LiteLLM), null (some Ollama builds) or leave the key out
    fake_llm.enqueue(
        oa_reply(
            None,
            [
                oa_call("c1", "get_order", ""),
                {"id": "c2", "type": "function", "function": {"name": "get_order"}},
                {
                    "id": "c3",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": None},
                },
                oa_call("c4", "get_order", "null"),
            ],
        )
    )
    r = openai_model.complete(MSGS, [SPEC])
    assert [(c.id, c.arguments, c.raw_arguments) for c in r.message.tool_calls] == [
        ("c1", {}, None),
        ("c2", {}, None),
        ("c3", {}, None),
        ("c4", {}, None),
    ]


@pytest.mark.parametrize("index", [True, False])
def test_calls_without_arguments_are_kept_streaming(fake_llm, openai_model, index):
    # two argument-less calls of one tool back to back: two calls, not one merged
    chunks = oa_call_chunks([("c1", "get_order", ""), ("c2", "get_order", "")], index=index)
    fake_llm.enqueue(Reply(sse=chunks))
    r = openai_model.stream(MSGS, [SPEC])
    assert [(c.id, c.name, c.arguments) for c in r.message.tool_calls] == [
        ("c1", "get_order", {}),
        ("c2", "get_order", {}),
    ]
    assert r.incomplete_calls == []


def test_a_reply_cut_off_inside_a_call_keeps_that_call_out_blocking(fake_llm, openai_model):
    fake_llm.enqueue(
        oa_reply(
            "Looking up both.",
            [oa_call("c1", "get_order", '{"order_id": "A1"}'), oa_call("c2", "cancel", '{"or')],
            finish_reason="length",
        ),
        oa_reply(None, [oa_call("c3", "get_order", "")], finish_reason="length"),
    )
    r = openai_model.complete(MSGS, [SPEC])
    assert r.cut_off and r.finish_reason == "length"
    assert [(c.id, c.arguments) for c in r.message.tool_calls] == [("c1", {"order_id": "A1"})]
    assert [(c.id, c.name, c.raw_arguments) for c in r.incomplete_calls] == [
        ("c2", "cancel", '{"or')
    ]
    r = openai_model.complete(MSGS, [SPEC])  # cut right after the name: "" is not "no args"
    assert r.message.tool_calls == [] and [c.id for c in r.incomplete_calls] == ["c3"]


@pytest.mark.parametrize("args", ['{"order_id": "A', ""])
def test_a_reply_cut_off_inside_a_call_keeps_that_call_out_streaming(fake_llm, openai_model, args):
    chunks = oa_call_chunks(
        [("c1", "get_order", '{"order_id": "A1"}'), ("c2", "get_order", args)],
        finish_reason="length",
    )
    fake_llm.enqueue(Reply(sse=chunks))
    r = openai_model.stream(MSGS, [SPEC])
    assert r.cut_off
    assert [(c.id, c.arguments) for c in r.message.tool_calls] == [("c1", {"order_id": "A1"})]
    assert [(c.id, c.raw_arguments) for c in r.incomplete_calls] == [("c2", args)]


def test_an_error_object_inside_a_stream_with_choices_is_a_model_error(fake_llm, openai_model):
    # OpenRouter's mid-stream error: an error object next to a choice with finish "error"
    chunks = oa_call_chunks([("c1", "get_order", '{"order_id": "A1"}')], finish_reason=None)
    chunks.append(
        {
            "id": "gen-1",
            "object": "chat.completion.chunk",
            "error": {"code": "server_error", "message": "Provider disconnected unexpectedly"},
            "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
        }
    )
    fake_llm.enqueue(Reply(sse=chunks))
    with pytest.raises(ModelHTTPError, match="Provider disconnected unexpectedly"):
        openai_model.stream(MSGS, [SPEC])
    fake_llm.enqueue(Reply(sse=[*chunks[:-1], oa_chunk({}, "error")]))
    with pytest.raises(ModelHTTPError, match="ended the stream with an error"):
        openai_model.stream(MSGS, [SPEC])
    assert len(fake_llm.requests) == 2  # not retried after deltas arrived


def test_a_blocking_reply_with_finish_reason_error_is_a_model_error(fake_llm, openai_model):
    body = oa_reply(None, [oa_call("c1", "get_order", '{"order_id": "A1"}')], finish_reason="error")
    body["error"] = {"message": "upstream timed out"}
    fake_llm.enqueue(body)
    with pytest.raises(ModelHTTPError, match="upstream timed out"):
        openai_model.complete(MSGS, [SPEC])


def test_a_stream_closed_inside_a_call_is_a_model_error(fake_llm, openai_model):
    chunks = oa_call_chunks([("c1", "get_order", '{"order_id": "A1"}')], finish_reason=None)
    fake_llm.enqueue(Reply(sse=chunks[:-1], done=False))  # closed cleanly, mid-arguments
    with pytest.raises(ModelHTTPError, match="ended inside a tool call"):
        openai_model.stream(MSGS, [SPEC])
    fake_llm.enqueue(Reply(sse=chunks, cut_after=len(chunks) - 1))  # connection reset
    with pytest.raises(ModelHTTPError, match="stream broke"):
        openai_model.stream(MSGS, [SPEC])


def test_deeply_nested_arguments_become_a_parse_error_not_a_crash(fake_llm, openai_model):
    deep = '{"a": ' * 1_500 + "1" + "}" * 1_500
    fake_llm.enqueue(oa_reply(None, [oa_call("c1", "get_order", deep)]))
    r = openai_model.complete(MSGS, [SPEC])
    assert r.message.tool_calls[0].arguments == {}
    assert r.message.tool_calls[0].raw_arguments == deep
    fake_llm.enqueue(Reply(sse=oa_call_chunks([("c1", "get_order", deep)], split=500)))
    r = openai_model.stream(MSGS, [SPEC])
    assert r.message.tool_calls[0].arguments == {} and r.incomplete_calls == []


def test_a_reply_body_too_deep_for_json_loads_is_read_pruned(fake_llm, openai_model):
    # Ollama-style object arguments 1,500 levels deep: the body itself is that deep
    deep = '{"a": ' * 1_500 + "1" + "}" * 1_500
    body = json.dumps(oa_reply(None, [oa_call("c1", "get_order", {"x": 1})]))
    fake_llm.enqueue(Reply(body=body.replace('{"x": 1}', deep).encode()))
    r = openai_model.complete(MSGS, [SPEC])
    call = r.message.tool_calls[0]
    assert (call.id, call.arguments) == ("c1", {})
    assert "nested more than 64" in parse_arguments(call.raw_arguments).error
    line = json.dumps(oa_chunk({"content": "hi"}))[:-1] + f', "x": {deep}}}'
    fake_llm.enqueue(Reply(sse=[f"data: {line}\n\n", oa_chunk({}, "stop")]))
    assert openai_model.stream(MSGS, [SPEC]).message.content == "hi"


def test_a_retry_after_beyond_the_deadline_fails_at_once_with_the_reason(fake_llm):
    model = OpenAIChatModel(
        "fake-model",
        fast_provider("openai", fake_llm.openai_url, max_retry_after=None, deadline=2.0),
    )
    fake_llm.enqueue(
        Reply(
            status=429, json={"error": {"message": "rate limited"}}, headers={"Retry-After": "30"}
        )
    )
    t0 = time.perf_counter()
    with pytest.raises(ModelHTTPError, match=r"rate limited \(the provider asks to retry after 30"):
        model.complete(MSGS, [])
    assert time.perf_counter() - t0 < 1.0 and len(fake_llm.requests) == 1


def test_a_retry_after_within_the_deadline_is_waited_in_full(fake_llm):
    # longer than the backoff cap: the provider's word counts, not our backoff
    model = OpenAIChatModel(
        "fake-model",
        fast_provider("openai", fake_llm.openai_url, max_retry_after=None, deadline=5.0),
    )
    fake_llm.enqueue(
        Reply(status=429, json={"error": {"message": "slow"}}, headers={"Retry-After": "0.6"}),
        Reply(status=429, json={"error": {"message": "slow"}}, headers={"Retry-After": "0.6"}),
        oa_reply("ok"),
    )
    t0 = time.perf_counter()
    assert model.complete(MSGS, []).message.content == "ok"
    assert time.perf_counter() - t0 >= 1.2 and len(fake_llm.requests) == 3
    fake_llm.enqueue(
        Reply(status=429, json={"error": {"message": "slow"}}, headers={"Retry-After": "0.5"}),
        Reply(sse=oa_text_chunks("streamed")),
    )
    t0 = time.perf_counter()
    assert model.stream(MSGS, []).message.content == "streamed"
    assert time.perf_counter() - t0 >= 0.5
