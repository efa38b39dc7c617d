"""Completion layer 1: an answer may only claim what the shop shows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentweb.runtime.loop import Agent, AgentConfig, Finished
from agentweb.runtime.testing import ScriptedModel, call
from agentweb.runtime.tools import load_tools
from agentweb.shop.validators import (
    ToolResult,
    check_claims,
    claims_in,
    claims_validator,
    validator_for_ticket,
)
from tools.ticket.demo import DemoModel


@pytest.mark.parametrize(
    ("answer", "claims"),
    [
        ("I have issued a full refund of 149.00 for order A1021.", ["refund"]),
        ("Refund of 38.00 was issued; it shows in 3-5 days.", ["refund"]),
        ("Order A1008 has been cancelled and 149.00 refunded.", ["refund", "cancellation"]),
        ("I've updated the shipping address on A1011.", ["address change"]),
        ("The shipping address has been changed to 48 Harbor St.", ["address change"]),
        ("I've sent the customer a reply explaining the delay.", ["reply to the customer"]),
        ("The approver rejected it, so no refund has been issued.", []),
        ("I did not issue a refund and I couldn't cancel the order.", []),
        ("I will issue a refund once approved.", []),
        ("I drafted a reply below for you to send.", []),
        ("Order A1010 had already shipped, so it could not be cancelled.", []),
        ("The parcel is in transit; expected by Friday.", []),
    ],
)
def test_it_recognises_claims(answer, claims):
    assert claims_in(answer) == claims


def test_it_accepts_an_answer_without_claims(db):
    assert check_claims("The order is on its way.", None, []) is None


def test_it_objects_to_a_refund_the_shop_does_not_show(shop):
    message = check_claims("I refunded 30.00 on A1003.", shop["ticket"].pk, [])
    assert "does not show it: refund" in message
    assert "Only state what a tool confirmed" in message


def test_it_accepts_a_refund_the_run_made(shop, call):
    result = call("issue_refund", order_id="A1003", amount=30, reason="Late")
    done = [ToolResult("issue_refund", {}, True, result)]
    assert check_claims("I have issued a refund of 30.00.", shop["ticket"].pk, done) is None


def test_it_does_not_trust_a_tool_result_the_shop_does_not_back(shop):
    forged = [ToolResult("issue_refund", {}, True, {"refund_id": "R999999", "status": "x"})]
    message = check_claims("I have issued a refund.", None, forged)
    assert message is not None and "does not show it: refund." in message
    failed = [ToolResult("issue_refund", {}, False, "Error: exceeds")]
    message = check_claims("I have issued a refund.", None, failed)
    assert message is not None and "does not show it: refund." in message


def test_it_accepts_rows_in_the_tickets_scope_since_the_run_started(shop, call):
    since = timezone.now() - timedelta(seconds=1)
    call("issue_refund", order_id="A1002", amount=5, reason="Goodwill")
    ticket = shop["ticket"]  # about A1002
    assert check_claims("We refunded 5.00.", ticket.pk, [], since=since) is None
    later = timezone.now() + timedelta(hours=1)
    message = check_claims("We refunded 5.00.", ticket.pk, [], since=later)
    assert message is not None and "does not show it: refund." in message


def test_it_checks_cancellations_addresses_and_replies(shop, call):
    ticket = shop["ticket"]
    claims = (
        "Order A1001 has been cancelled. I've updated the shipping address. "
        "I've sent the customer a reply."
    )
    message = check_claims(claims, ticket.pk, [])
    assert "cancellation, address change, reply to the customer" in message
    results = [
        ToolResult(
            "cancel_order", {}, True, call("cancel_order", order_id="A1001", reason="Not needed")
        ),
        ToolResult(
            "update_shipping_address",
            {},
            True,
            call(
                "update_shipping_address",
                call_id="c2",
                order_id="A1005",
                address="9 New Street, Austin, TX 78701",
            ),
        ),  # fmt: skip
        ToolResult(
            "send_customer_reply",
            {},
            True,
            call(
                "send_customer_reply",
                call_id="c3",
                ticket_id=str(ticket.pk),
                customer_id="C001",
                message="Hi",
            ),
        ),  # fmt: skip
    ]
    assert check_claims(claims, ticket.pk, results) is None


def test_it_stops_a_model_claiming_what_it_did_not_do(transactional_db, shop):
    model = ScriptedModel(
        [
            "I have issued a full refund of 80.00 for order A1003.",
            "Correction: no refund was issued; the order is delivered.",
        ]
    )
    agent = Agent(
        model,
        load_tools(["tools.ticket"]),
        AgentConfig(system_prompt=""),
        validator=validator_for_ticket(shop["ticket"].pk),
    )
    state = agent.start("Customer wants money back for A1003")
    outcome = agent.step(state).outcome
    assert outcome is None  # objected: the loop continues
    assert "does not show it: refund" in state.messages[-1].content
    outcome = agent.step(state).outcome
    assert isinstance(outcome, Finished)
    assert outcome.answer.startswith("Correction")


def test_it_accepts_a_claim_backed_by_the_runs_own_call(transactional_db, shop):
    model = ScriptedModel(
        [
            call("issue_refund", order_id="A1003", amount=10, reason="Goodwill"),
            "I have issued a refund of 10.00 on A1003.",
        ]
    )
    agent = Agent(
        model, load_tools(["tools.ticket"]), AgentConfig(system_prompt=""),
        validator=claims_validator,
    )  # fmt: skip
    state = agent.start("Goodwill for A1003", context={"subject": shop["ticket"].pk})
    while (outcome := agent.step(state).outcome) is None:
        pass
    assert isinstance(outcome, Finished) and outcome.decided_by == "validator"


def test_the_demo_model_corrects_itself_when_told(transactional_db, shop):
    objections = iter(["Your answer says a reply was sent, but the shop does not show it."])

    def validator(answer, state):
        return next(objections, None)

    agent = Agent(
        DemoModel(), load_tools(["tools.ticket"]), AgentConfig(system_prompt=""),
        validator=validator,
    )  # fmt: skip
    state = agent.start("Do you ship to Canada?")
    while (outcome := agent.step(state).outcome) is None:
        pass
    assert outcome.answer.startswith("I re-checked what the tools confirmed")
    assert "Changes in the shop: none." in outcome.answer
