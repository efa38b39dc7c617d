"""Tools from elsewhere: ``Tool.from_schema`` (arguments described by a JSON Schema, as an
MCP server states them) and ``ToolSources`` (tools that change while the process runs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agentweb.runtime import (
    Agent,
    AgentConfig,
    ToolArgumentError,
    ToolContext,
    ToolMessage,
    ToolRegistry,
    tool,
)
from agentweb.runtime.events import TOOL_CALL_FINISHED
from agentweb.runtime.testing import ScriptedModel, call
from agentweb.runtime.tools import Tool, ToolSources

SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "order-ref": {"type": "string", "pattern": "^A[0-9]+$"},
        "amount": {"type": "number", "exclusiveMinimum": 0},
        "mode": {"type": "string", "enum": ["card", "voucher"]},
    },
    "required": ["order-ref", "amount"],
    "additionalProperties": False,
}


def _schema_tool(seen: list[tuple[dict[str, Any], ToolContext | None]], **kw: Any) -> Tool:
    def run(arguments: dict[str, Any], ctx: ToolContext | None) -> dict[str, Any]:
        seen.append((arguments, ctx))
        return {"refunded": arguments["amount"]}

    return Tool.from_schema("shop__refund", SCHEMA, run, description="Refund.", **kw)


def test_it_offers_the_schema_as_given_and_names_its_parameters():
    t = _schema_tool([])
    assert t.spec().parameters == SCHEMA  # not cleaned, not regenerated
    assert t.params == ("order-ref", "amount", "mode")
    assert t.required == frozenset({"order-ref", "amount"})
    assert t.risk == "high" and not t.idempotent


def test_it_checks_arguments_against_the_schema_with_readable_reasons():
    t = _schema_tool([])
    assert t.validate({"order-ref": "A1", "amount": 5}) == {"order-ref": "A1", "amount": 5}
    with pytest.raises(ToolArgumentError) as exc:
        t.validate({"order-ref": "B1", "amount": -1, "extra": 1})
    text = str(exc.value)
    assert "'order-ref': 'B1' does not match" in text
    assert "'amount': -1 is less than or equal to the minimum of 0" in text
    assert "'extra' was unexpected" in text
    assert (
        "Expected arguments: order-ref (string), amount (number), "
        "mode (one of 'card', 'voucher') optional." in text
    )
    assert exc.value.fields == {
        "order-ref": "'B1' does not match '^A[0-9]+$'",
        "amount": "-1 is less than or equal to the minimum of 0",
        "extra": "not an argument of this tool",
    }
    with pytest.raises(ToolArgumentError, match="'amount' is a required property") as missing:
        t.validate({"order-ref": "A1"})
    assert missing.value.fields == {"amount": "required"}
    with pytest.raises(ToolArgumentError, match="'mode': 'cash' is not one of"):
        t.validate({"order-ref": "A1", "amount": 1, "mode": "cash"})


def test_a_schema_that_is_not_a_valid_object_schema_is_refused():
    with pytest.raises(ValueError, match="must describe an object"):
        Tool.from_schema("x", {"type": "string"}, lambda a, c: None)
    with pytest.raises(ValueError, match="not valid"):
        Tool.from_schema("x", {"type": "object", "properties": {"a": {"type": 5}}}, lambda a, c: 0)


def test_bare_boolean_property_schemas_do_not_break_the_explanation():
    t = Tool.from_schema(
        "x", {"type": "object", "properties": {"a": True}, "required": ["a"]}, lambda a, c: 0
    )
    with pytest.raises(ToolArgumentError, match="'a' is a required property"):
        t.validate({})


def test_the_loop_checks_then_calls_it_with_the_arguments_and_the_context():
    seen: list[tuple[dict[str, Any], ToolContext | None]] = []
    t = _schema_tool(seen, risk="low")
    model = ScriptedModel(
        [
            call("shop__refund", {"order-ref": "nope", "amount": 1}),
            call("shop__refund", {"order-ref": "A7", "amount": 2.5}),
            "done",
        ]
    )
    agent = Agent(model, ToolRegistry([t]), AgentConfig(system_prompt=""))
    state = agent.start("refund", context={"run_id": "r1"})
    events = list(agent.run(state))
    refused = [m for m in state.messages if isinstance(m, ToolMessage)][0]
    assert refused.is_error and "'order-ref': 'nope' does not match" in refused.content
    finished = [e.data for e in events if e.type == TOOL_CALL_FINISHED]
    assert [(f["ok"], f["result"]) for f in finished] == [(True, {"refunded": 2.5})]
    assert len(seen) == 1  # the refused call never reached the tool
    arguments, ctx = seen[0]
    assert arguments == {"order-ref": "A7", "amount": 2.5}
    assert ctx is not None and ctx.run_id == "r1" and ctx.call_id == finished[0]["call_id"]
    model.assert_complete()


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


class _Source:
    def __init__(self, tools: Sequence[Tool]) -> None:
        self.now: Sequence[Tool] = tuple(tools)
        self.asked = 0

    def tools(self) -> Sequence[Tool]:
        self.asked += 1
        return self.now

    def families(self) -> set[str]:
        return {t.name.split("__")[0] for t in self.now}


def test_sources_join_the_fixed_tools_and_the_assembly_is_kept_while_nothing_changes():
    base = ToolRegistry([lookup])
    sources = ToolSources()
    assert sources.registry(base) is base  # no source: the fixed registry itself
    first = _schema_tool([])
    source = _Source([first])
    sources.add(source)
    one = sources.registry(base)
    assert one.names() == ["lookup", "shop__refund"]
    assert sources.registry(base) is one  # same answer from the source: same registry
    second = Tool.from_schema("shop__note", {"type": "object"}, lambda a, c: "ok")
    source.now = (first, second)
    two = sources.registry(base)
    assert two is not one and two.names() == ["lookup", "shop__refund", "shop__note"]
    assert sources.families() == {"shop"}
    sources.remove(source)
    assert sources.registry(base) is base


def test_a_source_tool_whose_name_is_taken_is_left_out(caplog: pytest.LogCaptureFixture):
    sources = ToolSources()
    clash = Tool.from_schema("lookup", {"type": "object"}, lambda a, c: "theirs")
    sources.add(_Source([clash]))
    assembled = sources.registry(ToolRegistry([lookup]))
    assert assembled.get("lookup") is lookup
    assert "'lookup' from a tool source is left out" in caplog.text
