import pytest

from agentweb.runtime.messages import ToolCall
from agentweb.runtime.parsing import (
    ThinkFilter,
    ensure_unique_ids,
    parse_arguments,
    parse_text_calls,
    split_reasoning,
)

TOOLS = {"get_order": ("order_id",), "search_kb": ("query",)}


@pytest.mark.parametrize(
    ("raw", "expected", "repaired"),
    [
        ({"order_id": "A1"}, {"order_id": "A1"}, False),
        ('{"order_id": "A1"}', {"order_id": "A1"}, False),
        ("", {}, False),
        ("   ", {}, False),
        (None, {}, False),
        ('"{\\"order_id\\": \\"A1\\"}"', {"order_id": "A1"}, True),  # double-encoded
        ('{"order_id": "A1", "n": [1, 2,],}', {"order_id": "A1", "n": [1, 2]}, True),
        (
            "{'order_id': 'A1', 'flag': true, 'x': null}",
            {"order_id": "A1", "flag": True, "x": None},
            True,
        ),
        ('```json\n{"order_id": "A1"}\n```', {"order_id": "A1"}, True),
    ],
)
def test_it_recovers_arguments(raw, expected, repaired):
    out = parse_arguments(raw)
    assert out.error is None
    assert out.arguments == expected
    assert (out.raw is not None) is repaired


@pytest.mark.parametrize("raw", ['{"order_id": "A1"', "order A1 please", "[1, 2]", "42"])
def test_it_reports_unrecoverable_arguments(raw):
    out = parse_arguments(raw)
    assert out.arguments == {} and out.raw == raw and out.error


def test_it_splits_think_blocks():
    assert split_reasoning("<think>hmm\nplan</think>\n\nThe answer.") == (
        "The answer.",
        "hmm\nplan",
    )
    assert split_reasoning("plan first</think>Answer") == ("Answer", "plan first")
    assert split_reasoning("<think>never closed") == ("", "never closed")
    assert split_reasoning("a < b and no tags") == ("a < b and no tags", None)


def test_the_streaming_think_filter_holds_back_split_tags():
    f = ThinkFilter()
    pieces = ["Hel", "lo <th", "ink>secret <tool_call>{}</tool_call> stuff</thi", "nk> world", "<"]
    out = "".join(f.feed(p) for p in pieces) + f.flush()
    assert out == "Hello  world<"
    assert f.reasoning == "secret <tool_call>{}</tool_call> stuff"


def test_it_finds_tool_call_tags():
    text = (
        "Checking.\n<tool_call>\n"
        '{"name": "get_order", "arguments": {"order_id": "A1"}}\n</tool_call>'
    )
    out = parse_text_calls(text, TOOLS)
    assert out.form == "tags" and out.text == "Checking."
    assert [(c.name, c.arguments) for c in out.calls] == [("get_order", {"order_id": "A1"})]


def test_tags_with_an_unknown_tool_still_count_as_a_call():
    out = parse_text_calls('<tool_call>{"name": "launch", "arguments": {}}</tool_call>', TOOLS)
    assert [c.name for c in out.calls] == ["launch"]


def test_it_finds_function_tags():
    out = parse_text_calls('<function=search_kb>{"query": "returns"}</function>', TOOLS)
    assert [(c.name, c.arguments) for c in out.calls] == [("search_kb", {"query": "returns"})]


def test_it_finds_a_json_call_in_a_fenced_block():
    text = (
        'I will look it up.\n```json\n{"name": "get_order", "arguments": {"order_id": "A7"}}\n```'
    )
    out = parse_text_calls(text, TOOLS)
    assert out.form == "json" and out.text == "I will look it up."
    assert [(c.name, c.arguments) for c in out.calls] == [("get_order", {"order_id": "A7"})]


def test_it_finds_other_call_shapes():
    forms = [
        '{"tool": "get_order", "args": {"order_id": "A7"}}',
        '[{"type": "function", "function": {"name": "get_order", '
        '"arguments": "{\\"order_id\\": \\"A7\\"}"}}]',
        '[TOOL_CALLS] [{"name": "get_order", "arguments": {"order_id": "A7"}}]',
        '<|python_tag|>{"name": "get_order", "parameters": {"order_id": "A7"}}',
        'functools[{"name": "get_order", "arguments": {"order_id": "A7"}}]',
    ]
    for text in forms:
        out = parse_text_calls(text, TOOLS)
        assert [(c.name, c.arguments) for c in out.calls] == [("get_order", {"order_id": "A7"})], (
            text
        )


def test_a_json_block_that_is_part_of_the_answer_is_not_a_call():
    answers = [
        'Your order:\n```json\n{"order_id": "A7", "status": "shipped"}\n```',
        '```json\n{"name": "Ann", "arguments": {"a": 1}}\n```',  # not a registered tool
        '{"name": "get_order", "arguments": {"order_id": "A7"}, "note": "example"}',
        '```python\n{"name": "get_order", "arguments": {}}\n```',
    ]
    for text in answers:
        out = parse_text_calls(text, TOOLS)
        assert out.calls == [] and out.text == text


def test_it_parses_react_text():
    text = (
        'Thought: I need the order.\nAction: get_order\nAction Input: {"order_id": "A9"}\n'
        "Observation:"
    )
    out = parse_text_calls(text, TOOLS)
    assert out.form == "react" and out.text == "Thought: I need the order."
    assert [(c.name, c.arguments) for c in out.calls] == [("get_order", {"order_id": "A9"})]


def test_react_plain_input_maps_to_a_single_parameter():
    out = parse_text_calls("Thought: look\nAction: search_kb\nAction Input: refund policy", TOOLS)
    assert out.calls[0].arguments == {"query": "refund policy"}


def test_react_final_answer_is_the_answer():
    out = parse_text_calls("Thought: I know it now.\nFinal Answer: It shipped.", TOOLS)
    assert out.calls == [] and out.text == "It shipped."


def test_plain_text_is_an_answer():
    out = parse_text_calls("The order shipped yesterday.", TOOLS)
    assert out.calls == [] and out.form == "answer"


def test_it_replaces_missing_and_duplicated_ids_and_keeps_good_ones():
    calls = [
        ToolCall(id="call_a", name="x"),
        ToolCall(id="", name="y"),
        ToolCall(id="call_a", name="z"),
        ToolCall(id="odd id/with:chars", name="w"),
    ]
    out = ensure_unique_ids(calls, {"seen"})
    ids = [c.id for c in out]
    assert ids[0] == "call_a" and ids[3] == "odd id/with:chars"
    assert len(set(ids)) == 4 and all(ids)
    again = ensure_unique_ids([ToolCall(id="seen", name="x")], {"seen"})
    assert again[0].id != "seen"


def test_react_needs_an_input_line_or_a_known_tool():
    assert parse_text_calls("Thought: fine\nAction: nothing", TOOLS).calls == []
    out = parse_text_calls("Thought: x\nAction: launch\nAction Input: {}", TOOLS)
    assert [c.name for c in out.calls] == ["launch"]  # explicit syntax: the model hears back
