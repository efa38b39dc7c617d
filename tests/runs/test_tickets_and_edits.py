"""One active run per ticket, what earlier runs did in a new run's context, and edited
arguments that must meet the tool's own rules (its ``check``)."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client
from django.utils import timezone

from agentweb.accounts.models import ApiToken
from agentweb.runs import actions, engine
from agentweb.runs.models import AgentProfile, Approval, Run, RunEvent, ToolExecution
from agentweb.runtime.messages import SystemMessage
from agentweb.runtime.testing import call
from tests.runs import sample_tools


def bearer(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def post(client: Client, url: str, data: Any) -> Any:
    return client.post(url, data=json.dumps(data), content_type="application/json")


def a_ticket() -> Any:
    from agentweb.shop.models import Customer
    from tests.tickets.factories import make_ticket

    customer = Customer.objects.create(
        code="C9", name="Grace", email="g@example.com", created_at=timezone.now()
    )
    return make_ticket("Broken mug", "It arrived broken.", customer=customer)


def test_a_busy_ticket_answers_409_with_its_active_run(people, scripted, enqueued) -> None:
    ticket = a_ticket()
    client = bearer(people["operator"])
    first = post(client, "/api/runs", {"task": "Handle it", "ticket": ticket.pk})
    assert first.status_code == 201
    run_id = first.json()["id"]
    for status in (Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.WAITING_APPROVAL):
        Run.objects.filter(pk=run_id).update(status=status)
        again = post(bearer(people["operator2"]), "/api/runs", {"task": "", "ticket": ticket.pk})
        assert again.status_code == 409, status
        body = again.json()
        assert body["error"]["code"] == "ticket_busy"
        assert body["active_run"] == run_id
    assert Run.objects.filter(ticket=ticket).count() == 1
    # the page's button goes to the active run instead of starting another
    page = Client()
    page.force_login(people["operator2"])
    response = page.post(f"/tickets/{ticket.pk}/run/")
    assert response.status_code == 302 and response["Location"] == f"/runs/{run_id}/"
    assert Run.objects.filter(ticket=ticket).count() == 1
    Run.objects.filter(pk=run_id).update(status=Run.Status.SUCCEEDED)
    assert post(client, "/api/runs", {"task": "Again", "ticket": ticket.pk}).status_code == 201
    # a run without a ticket is never busy
    assert post(client, "/api/runs", {"task": "Anything"}).status_code == 201


def test_the_ticket_card_links_to_the_active_run(people, scripted, enqueued) -> None:
    ticket = a_ticket()
    run = actions.do_create_run(user=people["operator"], task="x", ticket_id=ticket.pk)
    page = Client()
    page.force_login(people["operator"])
    html = page.get("/tickets/").content.decode()
    assert f'href="/runs/{run.pk}/"' in html and 'data-testid="active-run"' in html
    assert f'action="/tickets/{ticket.pk}/run/"' not in html


def test_a_later_run_on_the_ticket_sees_what_earlier_runs_did(people, scripted, enqueued) -> None:
    AgentProfile.objects.filter(name="ticket-assistant").update(
        approval_policies={"pay_out": {"argument": "amount", "at_least": 50}}
    )
    ticket = a_ticket()
    scripted.enqueue(call("pay_out", order_id="A7", amount=12.5), "Refunded the mug.")
    first = actions.do_create_run(user=people["operator"], task="Mug", ticket_id=ticket.pk)
    assert engine.execute_run(first.pk) == Run.Status.SUCCEEDED
    scripted.enqueue("Already refunded earlier; nothing more to do.")
    second = actions.do_create_run(user=people["operator"], task="Mug again", ticket_id=ticket.pk)
    assert engine.execute_run(second.pk) == Run.Status.SUCCEEDED
    system = scripted.requests[-1].messages[0]
    assert isinstance(system, SystemMessage)
    assert "Earlier runs on this ticket" in system.content
    assert f"run {first.pk}" in system.content and "pay_out" in system.content
    assert '"amount": 12.5' in system.content
    assert sample_tools.SIDE_EFFECTS["A7"] == 1
    # a run on another ticket is told nothing
    other = actions.do_create_run(user=people["operator"], task="Else", ticket_id=a_ticket2().pk)
    scripted.enqueue("ok")
    engine.execute_run(other.pk)
    assert "Earlier runs" not in scripted.requests[-1].messages[0].content


def a_ticket2() -> Any:
    from agentweb.shop.models import Customer
    from tests.tickets.factories import make_ticket

    customer = Customer.objects.create(
        code="C8", name="Ada", email="a@example.com", created_at=timezone.now()
    )
    return make_ticket("Late", "Where is it?", customer=customer)


def test_an_edit_that_breaks_the_tools_rules_is_422_and_stays_pending(
    people, scripted, enqueued
) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30))
    run = actions.do_create_run(user=people["operator"], task="Pay")
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    approval = Approval.objects.get(run=run)
    client = bearer(people["approver"])
    for bad, words in (({"amount": -5}, "more than zero"), ({"amount": 500}, "At most 80")):
        response = post(
            client,
            f"/api/approvals/{approval.pk}/decide",
            {"decision": "approve", "arguments": {"order_id": "A1", **bad}},
        )
        assert response.status_code == 422, response.content
        assert words in response.json()["error"]["message"]
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert enqueued == [run.pk]  # no resume
    assert sample_tools.SIDE_EFFECTS["A1"] == 0
    ok = post(
        client,
        f"/api/approvals/{approval.pk}/decide",
        {"decision": "approve", "arguments": {"order_id": "A1", "amount": 25}},
    )
    assert ok.status_code == 200


def test_the_check_also_runs_before_execution(people, scripted, enqueued) -> None:
    """Approved as asked (no edit), the call still meets the tool's rules before it runs."""
    scripted.enqueue(call("pay_out", order_id="A1", amount=500), "Could not pay that much.")
    run = actions.do_create_run(user=people["operator"], task="Pay")
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert sample_tools.SIDE_EFFECTS["A1"] == 0
    finished = RunEvent.objects.get(run=run, type="tool_call_finished").data
    assert finished["ok"] is False and finished["error"] == "At most 80 was paid on order A1."
    assert ToolExecution.objects.get(run=run).status == "failed"
    assert [(a["status"], a["approved_by"]) for a in run.actions()] == [("failed", "person")]
    tool_result = [m for m in scripted.requests[-1].messages if m.role == "tool"][-1]
    assert tool_result.content == "At most 80 was paid on order A1."  # exactly the reason
