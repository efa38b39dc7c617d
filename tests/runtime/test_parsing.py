import json

import pytest

from agentweb.runtime.messages import ToolCall
from agentweb.runtime.parsing import (
    ThinkFilter,
    ensure_unique_ids,
    json_complete,
    parse_arguments,
    parse_text_calls,
    prune_deep_json,
    resolve_tool_name,
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


# -- reply shapes from real providers (issue 14) ------------------------------------------

TOOLS2 = {
    "get_order": ("order_id",),
    "track_shipment": ("tracking_number",),
    "search_kb": ("query",),
    "add_note": ("customer_id", "note", "tags"),
}

QWEN_XML = (
    "I'll look both up.\n"
    "<tool_call>\n<function=get_order>\n<parameter=order_id>\nA1001\n</parameter>\n"
    "</function>\n</tool_call>\n"
    "<tool_call>\n<function=track_shipment>\n<parameter=tracking_number>\n1Z999AA1\n"
    "</parameter>\n</function>\n</tool_call>"
)


def test_it_reads_qwen3_coder_xml_calls_several_per_reply():
    out = parse_text_calls(QWEN_XML, TOOLS2)
    assert out.form == "tags" and out.text == "I'll look both up."
    assert [(c.name, c.arguments, c.raw_arguments) for c in out.calls] == [
        ("get_order", {"order_id": "A1001"}, None),
        ("track_shipment", {"tracking_number": "1Z999AA1"}, None),
    ]
    assert len({c.id for c in out.calls}) == 2


def test_qwen_xml_copes_with_missing_closing_tags_and_json_values():
    # a stop token ate </function></tool_call>; the second parameter has no </parameter>
    text = (
        "<tool_call>\n<function=add_note>\n<parameter=customer_id>\nC7\n"
        '<parameter=tags>\n["late", "vip"]\n</parameter>\n'
        "<parameter=note>\nline one\n  line two\n</parameter>\n"
    )
    out = parse_text_calls(text, TOOLS2)
    assert [(c.name, c.arguments) for c in out.calls] == [
        (
            "add_note",
            {"customer_id": "C7", "tags": ["late", "vip"], "note": "line one\n  line two"},
        )
    ]
    assert out.text == ""


def test_qwen_xml_explicit_syntax_counts_for_an_unknown_tool():
    text = "<tool_call><function=launch><parameter=x>1</parameter></function></tool_call>"
    assert [c.name for c in parse_text_calls(text, TOOLS2).calls] == ["launch"]


@pytest.mark.parametrize(
    "text",
    [
        "To look it up I would use <function=get_order> with the order id.",
        "You can call get_order(order_id) or track_shipment(tracking_number) yourself.",
        "The tool get_order(order_id='A1') told me it shipped.",
        "Use `functions.get_order` next time.",
        "I called [get_order(order_id='A1')] earlier and it said shipped.",
        "Action items: none. Everything shipped.",
    ],
)
def test_a_tool_mentioned_in_prose_is_not_a_call(text):
    out = parse_text_calls(text, TOOLS2)
    assert out.calls == [] and out.text == text and out.form == "answer"


def test_it_reads_llama_pythonic_calls():
    text = '[get_order(order_id="A1001"), track_shipment(tracking_number="1Z…")]'
    out = parse_text_calls(text, TOOLS2)
    assert out.form == "pythonic" and out.text == ""
    assert [(c.name, c.arguments) for c in out.calls] == [
        ("get_order", {"order_id": "A1001"}),
        ("track_shipment", {"tracking_number": "1Z…"}),
    ]
    out = parse_text_calls('<|python_tag|>get_order(order_id="A2")', TOOLS2)
    assert [(c.name, c.arguments) for c in out.calls] == [("get_order", {"order_id": "A2"})]
    out = parse_text_calls("get_order('A3')", TOOLS2)  # positional, in parameter order
    assert out.calls[0].arguments == {"order_id": "A3"}


def test_pythonic_calls_take_literals_only_and_never_evaluate(tmp_path):
    marker = tmp_path / "pwned"
    text = f"[get_order(order_id=__import__('os').system('touch {marker}'))]"
    out = parse_text_calls(text, TOOLS2)
    assert not marker.exists()
    assert [c.name for c in out.calls] == ["get_order"]
    assert out.calls[0].arguments == {} and out.calls[0].raw_arguments
    # a literal that is not JSON (a set, a complex number, 1e999) is not accepted either
    for bad in ("{1, 2}", "1j", "1e999", "b'x'"):
        call = parse_text_calls(f"[get_order(order_id={bad})]", TOOLS2).calls[0]
        assert call.arguments == {} and call.raw_arguments, bad
    nested = parse_text_calls('[add_note(customer_id="C1", tags=("a", "b"))]', TOOLS2).calls[0]
    assert nested.arguments == {"customer_id": "C1", "tags": ["a", "b"]}


def test_pythonic_needs_registered_names_without_explicit_syntax():
    assert parse_text_calls("[print(x=1)]", TOOLS2).calls == []
    assert parse_text_calls("[get_order(order_id='A1'), print(x=1)]", TOOLS2).calls == []
    out = parse_text_calls("<|python_tag|>[launch(x=1)]", TOOLS2)
    assert [c.name for c in out.calls] == ["launch"]


def test_it_reads_a_fenced_tool_code_block():
    text = 'Checking now.\n```tool_code\nfunctions.get_order(order_id="A5")\n```'
    out = parse_text_calls(text, TOOLS2)
    assert out.text == "Checking now."
    assert [(c.name, c.arguments) for c in out.calls] == [("get_order", {"order_id": "A5"})]


@pytest.mark.parametrize(
    "name", ["functions.get_order", "default_api:get_order", "tools/get_order", "get_order"]
)
def test_a_namespace_prefix_resolves_to_exactly_one_tool(name):
    assert resolve_tool_name(name, TOOLS2) == "get_order"
    text = f'```json\n{{"name": "{name}", "arguments": {{"order_id": "A1"}}}}\n```'
    assert [c.name for c in parse_text_calls(text, TOOLS2).calls] == ["get_order"]


def test_a_namespace_prefix_that_is_ambiguous_or_unknown_resolves_to_nothing():
    names = {"get_order": (), "shop.get_order": ()}
    assert resolve_tool_name("x.shop.get_order", names) is None  # both would fit
    assert resolve_tool_name("shop.get_order", names) == "shop.get_order"
    assert resolve_tool_name("functions.launch", TOOLS2) is None
    assert resolve_tool_name("functions", TOOLS2) is None


def _deep_text(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def _deep_dict(depth: int) -> dict:
    value: dict = {"a": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [65, 1_000, 5_000, 100_000])
def test_deeply_nested_arguments_are_an_error_not_a_crash(depth):
    out = parse_arguments(_deep_text(depth))
    assert out.arguments == {} and out.error and "nested" in out.error
    assert parse_arguments(out.raw).error  # the loop re-reads raw: same verdict
    out = parse_arguments("[" * depth + "]" * depth)
    assert out.arguments == {} and out.error
    out = parse_arguments(json.dumps(_deep_text(depth)))  # double-encoded and deep
    assert out.arguments == {} and out.error


def test_deeply_nested_argument_objects_are_an_error_too():
    out = parse_arguments(_deep_dict(2_000))
    assert out.arguments == {} and "nested" in out.error
    assert parse_arguments(out.raw).error == out.error
    assert parse_arguments(_deep_dict(10)).error is None


def test_deeply_nested_json_in_reply_text_does_not_crash_the_parser_chain():
    deep = '{"name": "get_order", "arguments": ' + _deep_text(3_000) + "}"
    for text in (
        deep,
        f"```json\n{deep}\n```",
        f"<tool_call>{deep}</tool_call>",
        f"Action: get_order\nAction Input: {_deep_text(3_000)}",
    ):
        out = parse_text_calls(text, TOOLS2)
        assert [(c.name, c.arguments) for c in out.calls] == [("get_order", {})], text[:40]
        assert "nested" in parse_arguments(out.calls[0].raw_arguments).error
    # Python's own parser refuses this nesting: no call, no crash
    out = parse_text_calls("[get_order(order_id=" + "[" * 3_000 + "]" * 3_000 + ")]", TOOLS2)
    assert out.calls == []


def test_null_arguments_mean_none():
    assert parse_arguments("null") == parse_arguments("") == parse_arguments(None)
    assert parse_arguments("null").arguments == {} and parse_arguments("null").error is None


def test_json_complete_tells_a_whole_value_from_a_cut_one():
    assert json_complete('{"a": 1}') and json_complete("{}") and json_complete(_deep_text(2000))
    assert not json_complete("") and not json_complete('{"a": ') and not json_complete('{"a"')


def test_prune_deep_json_replaces_only_what_is_too_deep():
    text = '{"a": [[[1]]], "s": "[[[\\"[{", "b": {"c": {"d": {}}}, "e": "x\\\\"}'
    assert json.loads(prune_deep_json(text, keep=2)) == {
        "a": [None],
        "s": '[[["[{',
        "b": {"c": None},
        "e": "x\\",
    }
    assert prune_deep_json(text, keep=10) == text
    pruned = json.loads(prune_deep_json('{"k": 1, "v": ' + _deep_text(50_000) + "}"))
    assert pruned["k"] == 1 and parse_arguments(pruned["v"]).error
