"""The demo model on its own: no database, just messages in and a reply out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tools.ticket
from agentweb.runtime.gateway import Model, ToolSpec
from agentweb.runtime.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from agentweb.runtime.models import model_from_config
from tools.ticket.demo import SCENARIOS, DemoModel, scenario_for

ROOT = Path(__file__).resolve().parents[2]
ALL_TOOLS = [
    "get_order", "track_shipment", "get_customer", "get_customer_notes", "check_inventory",
    "search_kb", "recall_customer_facts", "add_customer_note", "escalate_to_carrier",
    "remember_customer_fact", "issue_refund", "cancel_order", "update_shipping_address",
    "send_customer_reply",
]  # fmt: skip
SPECS = [ToolSpec(n, f"The {n} tool.", {"type": "object", "properties": {}}) for n in ALL_TOOLS]

ORDER = {
    "order_id": "A1005", "customer_id": "C005", "customer_name": "Zoe Vargas",
    "status": "delivered", "currency": "USD",
    "items": [
        {"sku": "TEA-0601", "name": "Sencha Green Tea 100g", "quantity": 1, "unit_price": "16.00"},
        {"sku": "KIT-0101", "name": "Stoneware Teapot 1.2L", "quantity": 1, "unit_price": "38.00"},
    ],
    "total": "54.00", "captured_amount": "54.00", "refunded_amount": "0.00",
    "refundable_amount": "54.00", "payments": [], "shipments": [],
    "can_cancel_or_change_address": False,
}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "scenario"),
    [
        ("My order A1 says delivered but I never got it", "not_received"),
        ("Where is my order A1?", "where_is"),
        ("The teapot arrived cracked", "damaged"),
        ("Please cancel order A1", "cancel"),
        ("I just moved, new address: 1 Main St, Town", "address"),
        ("Is OUT-0305 back in stock?", "stock"),
        ("I was charged twice for A1", "duplicate_charge"),
        ("Third time writing. Unacceptable!", "angry"),
        ("Used it for two months and don't like it, I want a refund", "policy_refund"),
        ("Do you ship to Canada?", "general"),
        ("I want a refund because it arrived broken", "damaged"),
    ],
)
def test_it_picks_the_scenario_from_the_words(text, scenario):
    assert scenario_for(text) == scenario


#: One ticket per scenario and the tools its first turn calls.
OPENINGS = {
    "not_received": ("My order A1005 says delivered but I never got it", ["get_order"]),
    "where_is": ("Where is my order A1005?", ["get_order"]),
    "damaged": ("The teapot of A1005 arrived cracked", ["get_order", "search_kb"]),
    "cancel": ("Please cancel order A1005", ["get_order"]),
    "address": ("I just moved, new address for A1005: 1 Main St, Town", ["get_order"]),
    "stock": ("Is OUT-0305 back in stock?", ["check_inventory", "search_kb"]),
    "duplicate_charge": ("I was charged twice for A1005", ["get_order", "search_kb"]),
    "angry": (
        "Third time writing about A1005. Unacceptable!",
        ["get_customer", "get_customer_notes", "recall_customer_facts"],
    ),
    "policy_refund": (
        "Used A1005 for two months and don't like it, I want a refund",
        ["get_order", "search_kb"],
    ),
    "general": ("Do you ship to Canada?", ["get_customer", "search_kb"]),
}


def test_every_scenario_plays_its_own_opening():
    """Each scenario of the table is reachable from a ticket's words and opens with its
    own plan, not the general fallback."""
    assert set(OPENINGS) == {name for name, _ in SCENARIOS}
    openings = {}
    for scenario, (text, calls) in OPENINGS.items():
        assert scenario_for(text) == scenario
        reply = DemoModel().complete(_start(text), SPECS).message
        assert [c.name for c in reply.tool_calls] == calls, scenario
        openings[scenario] = reply.content
    general = openings.pop("general")
    assert all(content and content != general for content in openings.values())
    assert len(set(openings.values())) >= 8


def test_it_is_a_scripted_model_named_demo():
    model = model_from_config("demo", demo=tools.ticket.demo_model)
    assert isinstance(model, DemoModel) and isinstance(model, Model)
    assert model.name == "demo" and model.scripted is True


def _start(text: str) -> list:
    return [
        SystemMessage(content="Ticket #5 from Zoe Vargas (C005): Teapot arrived cracked"),
        UserMessage(content=text),
    ]


def test_it_calls_tools_natively_and_deterministically():
    messages = _start("Handle ticket #5: Teapot arrived cracked\n\nThe teapot of A1005 cracked.")
    first = DemoModel().complete(messages, SPECS)
    second = DemoModel().complete(messages, SPECS)
    assert first.message == second.message
    assert first.usage == second.usage
    assert [c.name for c in first.message.tool_calls] == ["get_order", "search_kb"]
    assert first.message.tool_calls[0].arguments == {"order_id": "A1005"}
    assert len({c.id for c in first.message.tool_calls}) == 2
    assert first.finish_reason == "tool_calls"
    assert first.message.content  # a thought, not silence


def _with_results(messages, *results):
    """Append an assistant turn calling each (name, args) and its (content, is_error)."""
    out = list(messages)
    for n, (name, args, content, is_error) in enumerate(results):
        call_id = f"c{n}"
        out.append(AssistantMessage(tool_calls=[ToolCall(id=call_id, name=name, arguments=args)]))
        out.append(ToolMessage(call_id=call_id, name=name, content=content, is_error=is_error))
    return out


def test_it_refunds_the_damaged_item_named_in_the_ticket():
    messages = _with_results(
        _start("The stoneware teapot of A1005 arrived cracked."),
        ("get_order", {"order_id": "A1005"}, json.dumps(ORDER), False),
    )
    reply = DemoModel().complete(messages, SPECS).message
    (refund,) = reply.tool_calls
    assert refund.name == "issue_refund"
    assert refund.arguments["amount"] == 38.0
    assert refund.id not in {"c0"}


def test_it_does_not_retry_a_rejected_call():
    messages = _with_results(
        _start("The stoneware teapot of A1005 arrived cracked."),
        ("get_order", {"order_id": "A1005"}, json.dumps(ORDER), False),
        (
            "issue_refund",
            {"order_id": "A1005", "amount": 38.0, "reason": "x"},
            "A human reviewer rejected this call. Reason: Ask for a photo.",
            True,
        ),
    )
    reply = DemoModel().complete(messages, SPECS).message
    assert [c.name for c in reply.tool_calls] == ["add_customer_note"]
    assert "Ask for a photo" in reply.tool_calls[0].arguments["note"]


def test_it_explains_a_tool_error_instead_of_looping():
    messages = _with_results(
        _start("Please cancel order A1999"),
        ("get_order", {"order_id": "A1999"}, "Error: No order with id 'A1999'.", True),
    )
    reply = DemoModel().complete(messages, SPECS)
    assert reply.message.tool_calls == []
    assert "No order with id 'A1999'" in reply.message.content
    assert reply.finish_reason == "stop"


def test_it_recommends_what_it_may_not_do():
    messages = _with_results(
        _start("Please cancel order A1005"),
        ("get_order", {"order_id": "A1005"},
         json.dumps({**ORDER, "status": "paid", "can_cancel_or_change_address": True}), False),
    )  # fmt: skip
    read_only = [s for s in SPECS if s.name.startswith(("get_", "track", "search", "check"))]
    reply = DemoModel().complete(messages, read_only).message
    assert reply.tool_calls == []
    assert "For a person to do" in reply.content and "Cancel A1005" in reply.content


def test_it_streams_the_text_it_returns():
    chunks: list[str] = []
    messages = _start("Do you ship to Canada?")
    response = DemoModel().stream(messages, SPECS, on_delta=chunks.append)
    assert len(chunks) > 3
    assert "".join(chunks) == response.message.content


def test_it_counts_tokens_plausibly():
    short = DemoModel().complete(_start("Where is A1005?"), [])
    long = DemoModel().complete(_start("Where is A1005? " + "Please hurry. " * 200), SPECS)
    assert 10 < short.usage.input_tokens < long.usage.input_tokens
    assert short.usage.output_tokens > 0


def test_its_scenarios_import_nothing_from_django_or_the_shop():
    """The scenarios read only the conversation (runtime message types): no database."""
    for path in (ROOT / "tools" / "ticket" / "demo").glob("*.py"):
        imports = [
            line for line in path.read_text().splitlines() if line.startswith(("import ", "from "))
        ]
        bad = [
            line
            for line in imports
            if line.split()[1].split(".")[0] in ("django", "tools")
            or line.split()[1].startswith("agentweb.shop")
            or line.split()[1].startswith("agentweb.runs")
        ]
        assert bad == [], f"{path.name}: {bad}"


@pytest.mark.parametrize(
    ("status", "words"),
    [
        ("exception", "held up by the carrier because of a delivery problem"),
        ("in_transit", "on its way"),
        ("label_created", "waiting for the carrier to pick it up"),
        ("out_for_delivery", "out for delivery today"),
        ("returned", "on its way back to us"),
        ("lost_in_space", "lost in space"),
        (None, "on its way"),
    ],
)
def test_it_writes_a_carrier_status_in_words(status, words):
    from tools.ticket.demo.helpers import shipment_status

    assert shipment_status(status) == words
