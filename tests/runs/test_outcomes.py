"""A run's ``actions``: every medium/high-risk call with its fate, in the API too."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.runs import actions, engine
from agentweb.runs.models import Approval, Run
from agentweb.runtime.testing import call
from tests.runs import sample_tools


def start(people: dict[str, Any]) -> Run:
    return actions.do_create_run(user=people["operator"], task="Order A1 is broken")


def decide(people: dict[str, Any], run: Run, decision: str, **kw: Any) -> None:
    for approval in Approval.objects.filter(run=run, status="pending"):
        actions.do_decide_approval(
            approval_id=approval.pk, user=people["approver"], decision=decision, **kw
        )


def test_a_read_is_no_action_and_an_approved_write_is_executed_by_a_person(
    people, scripted, enqueued
) -> None:
    scripted.enqueue(
        call("lookup", order_id="A1"), call("pay_out", order_id="A1", amount=30), "Paid."
    )
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    call_id = Approval.objects.get(run=run).call_id
    assert run.actions() == [
        {"tool": "pay_out", "call_id": call_id, "status": "pending", "approved_by": None}
    ]
    decide(people, run, "approve")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert run.actions() == [
        {"tool": "pay_out", "call_id": call_id, "status": "executed", "approved_by": "person"}
    ]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(people['operator'])}")
    assert client.get(f"/api/runs/{run.pk}").json()["actions"] == run.actions()
    listed = client.get("/api/runs").json()["runs"]
    assert next(r for r in listed if r["id"] == run.pk)["actions"] == run.actions()


def test_a_succeeded_run_says_its_action_was_rejected(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "I explained instead.")
    run = start(people)
    engine.execute_run(run.pk)
    decide(people, run, "reject", comment="no")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert [(a["status"], a["approved_by"]) for a in run.actions()] == [("rejected", None)]


def test_a_write_a_policy_let_through_is_executed_by_policy_or_failed(
    people, scripted, enqueued
) -> None:
    from agentweb.runs.models import AgentProfile

    AgentProfile.objects.filter(name="ticket-assistant").update(
        approval_policies={"pay_out": {"argument": "amount", "at_least": 50}}
    )
    scripted.enqueue(
        call("pay_out", order_id="A1", amount=10),
        call("pay_out", order_id="A2", amount=0),  # the tool raises: a failed action
        "Done.",
    )
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert sample_tools.SIDE_EFFECTS["A1"] == 1
    assert [(a["tool"], a["status"], a["approved_by"]) for a in run.actions()] == [
        ("pay_out", "executed", "policy"),
        ("pay_out", "failed", "policy"),
    ]
    assert json.dumps(run.actions())  # plain JSON
