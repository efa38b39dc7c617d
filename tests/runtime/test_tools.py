import asyncio
import threading
import warnings
from enum import Enum
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from agentweb.runtime import ToolArgumentError, ToolContext, ToolRegistry, load_tools, tool
from agentweb.runtime.approvals import ApprovalGate
from agentweb.runtime.tools import repair_keys


def asks_person(t, args, override=None):
    """What the agent's gate says of a call of ``t`` (with a profile's risk override)."""
    return ApprovalGate().verdict(t, args, override or t.risk, override, {}).person


class Reason(Enum):
    DAMAGED = "damaged"
    LATE = "late"


class Address(BaseModel):
    street: str
    city: str
    zip_code: str | None = None


@tool(risk="high", approval=lambda args: args["amount"] >= 20, timeout=5, expected_duration=0.2)
def issue_refund(
    order_id: Annotated[str, Field(examples=["A1001"])],
    amount: float,
    reason: Reason,
    channel: Literal["card", "voucher"] = "card",
    notify: bool = True,
) -> dict:
    """Refund part or all of an order.

    Longer explanation that is still part of the summary.

    Args:
        order_id: The order to refund,
            as printed on the invoice.
        amount (float): Amount in EUR.
        reason: Why the customer gets money back.
        channel: Where the money goes.

    Returns:
        The refund record.
    """
    return {"order_id": order_id, "amount": amount, "reason": reason.value, "channel": channel}


@tool
def ship(order_id: str, address: Address, items: list[int], count: int = 1) -> str:
    """Ship items to an address."""
    return f"{order_id} -> {address.city} {items} x{count}"


def test_it_generates_the_schema_from_hints_and_docstring():
    s = issue_refund.schema
    assert s["type"] == "object"
    assert s["required"] == ["order_id", "amount", "reason"]
    props = s["properties"]
    assert props["order_id"]["description"] == "The order to refund, as printed on the invoice."
    assert props["order_id"]["examples"] == ["A1001"]
    assert props["amount"] == {"type": "number", "description": "Amount in EUR."}
    assert props["channel"]["enum"] == ["card", "voucher"]
    assert props["channel"]["default"] == "card"
    assert props["notify"]["default"] is True
    assert props["reason"]["enum"] == ["damaged", "late"]
    assert props["reason"]["description"] == "Why the customer gets money back."
    assert "$defs" not in s and "$ref" not in str(s)
    assert "title" not in s and "title" not in props["amount"]
    assert issue_refund.description.startswith("Refund part or all of an order.")
    assert "Returns" not in issue_refund.description
    assert issue_refund.spec().parameters is s


def test_it_handles_nested_models_lists_and_ints():
    s = ship.schema
    assert s["properties"]["items"] == {"type": "array", "items": {"type": "integer"}}
    assert s["properties"]["count"] == {"type": "integer", "default": 1}
    assert s["properties"]["address"]["required"] == ["street", "city"]
    assert s["properties"]["address"]["properties"]["city"] == {"type": "string"}
    parsed = ship.parse(
        {"order_id": "A1", "address": {"street": "s", "city": "Lyon"}, "items": [1]}
    )
    assert ship.fn(**ship.call_kwargs(parsed, None)) == "A1 -> Lyon [1] x1"


def test_it_keeps_risk_timeout_and_policy():
    assert issue_refund.risk == "high"
    assert issue_refund.timeout == 5 and issue_refund.expected_duration == 0.2
    assert issue_refund.idempotent is False
    assert ship.risk == "low" and ship.idempotent is True and ship.timeout == 30.0
    assert asks_person(issue_refund, {"amount": 25}) is True
    assert asks_person(issue_refund, {"amount": 5}) is False  # refunds under 20: no approval
    assert asks_person(issue_refund, {}) is True  # a failing policy fails closed
    assert asks_person(ship, {}) is False
    assert asks_person(ship, {}, override="high") is True


def test_it_explains_invalid_arguments_readably():
    with pytest.raises(ToolArgumentError) as err:
        issue_refund.validate({"amount": "lots", "reason": "bored", "channel": "cash"})
    msg = str(err.value)
    assert "missing required argument 'order_id' (string)" in msg
    assert "'amount'" in msg and "'lots'" in msg
    assert "'damaged'" in msg and "'late'" in msg
    assert "'card' or 'voucher'" in msg
    assert "Expected arguments: order_id (string)" in msg


def test_it_validates_into_json_ready_values():
    out = issue_refund.validate({"order_id": "A1", "amount": "12.5", "reason": "late"})
    assert out == {
        "order_id": "A1",
        "amount": 12.5,
        "reason": "late",
        "channel": "card",
        "notify": True,
    }


def test_it_repairs_keys_differing_in_case_or_separators():
    fixed, repairs = repair_keys(
        {"OrderId": "A1", "AMOUNT": 3, "reason": "late"}, ["order_id", "amount", "reason"]
    )
    assert fixed == {"order_id": "A1", "amount": 3, "reason": "late"}
    assert repairs == {"OrderId": "order_id", "AMOUNT": "amount"}
    fixed, repairs = repair_keys({"orderid": 1, "order-id": 2}, ["order_id"])
    assert fixed == {"order_id": 1, "order-id": 2} and repairs == {"orderid": "order_id"}
    assert issue_refund.repair({"order_id": "A", "orderId": "B"}) == (
        {"order_id": "A", "orderId": "B"},
        {},
    )


def test_it_rejects_duplicate_names():
    @tool(name="ship")
    def other(x: int) -> int:
        """Other."""
        return x

    with pytest.raises(ValueError, match="duplicate tool name 'ship'"):
        ToolRegistry([ship, other])


def test_tools_with_many_parameters_register_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @tool
        def wide(a: int, b: int, c: int, d: int, e: int, f: int, g: int, h: int = 0) -> int:
            """Seven required parameters and an optional one."""
            return a

    assert wide.params == ("a", "b", "c", "d", "e", "f", "g", "h")
    assert wide.required == frozenset("abcdefg")


def test_it_injects_ctx_without_putting_it_in_the_schema():
    @tool
    def whoami(ctx: ToolContext, greeting: str = "hi") -> str:
        """Say who calls."""
        return f"{greeting} {ctx.call_id} {ctx.user}"

    assert "ctx" not in whoami.schema["properties"] and whoami.takes_ctx
    parsed = whoami.parse({})
    kwargs = whoami.call_kwargs(parsed, ToolContext(call_id="c1", user="ann"))
    assert whoami.fn(**kwargs) == "hi c1 ann"


def test_it_supports_async_tools():
    @tool
    async def slow_echo(text: str) -> str:
        """Echo."""
        await asyncio.sleep(0)
        return text

    assert slow_echo.is_async
    assert asyncio.run(slow_echo(text="x")) == "x"


def test_the_registry_is_immutable_and_shareable():
    reg = ToolRegistry([issue_refund, ship])
    assert reg.names() == ["issue_refund", "ship"] and len(reg) == 2
    assert "ship" in reg and reg.get("nope") is None
    assert [s.name for s in reg.specs(allowed=["ship"])] == ["ship"]
    assert reg.subset(["ship"]).names() == ["ship"]
    with pytest.raises(KeyError):
        reg.subset(["nope"])
    with pytest.raises(TypeError):
        reg._tools["x"] = ship  # type: ignore[index]
    with pytest.raises(AttributeError):
        reg.extra = 1  # type: ignore[attr-defined]
    seen: list[list[str]] = []
    threads = [threading.Thread(target=lambda: seen.append(reg.names())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [["issue_refund", "ship"]] * 8


def test_it_loads_tools_from_modules():
    reg = load_tools(["tests.runtime.sample_tools.shop", ""])
    assert reg.names() == ["lookup", "refund_money"]
    assert reg.get("refund_money").risk == "high"
    with pytest.raises(ValueError, match="duplicate"):
        load_tools(["tests.runtime.sample_tools.shop", "tests.runtime.sample_tools.clash"])
    with pytest.raises(ImportError, match="no_such_module"):
        load_tools(["tests.runtime.no_such_module"])


def test_a_tool_is_still_callable_as_the_function():
    assert ship.__name__ == "ship"
    assert ship(order_id="A", address=Address(street="s", city="c"), items=[]) == "A -> c [] x1"


class Node(BaseModel):
    label: str
    children: list["Node"] = []


def test_recursive_models_keep_their_definitions():
    @tool
    def tree(root: Node) -> str:
        """Walk a tree."""
        return root.label

    s = tree.schema
    assert s["properties"]["root"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert "Node" in s["$defs"]
    assert (
        tree.validate({"root": {"label": "a", "children": [{"label": "b"}]}})["root"]["label"]
        == "a"
    )
