"""Dry runs (DESIGN §14): medium/high-risk tools never execute nor wait for a person,
low-risk reads run, and a dry run counts for no ticket-busy check and no policy total."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client
from django.utils import timezone

from agentweb.accounts.models import ApiToken
from agentweb.runs import actions, engine, profiles
from agentweb.runs.models import Approval, Run, RunEvent, ToolExecution
from agentweb.runtime.testing import call
from tests.runs import sample_tools

RULE = {"argument": "amount", "at_least": 20, "sum_per": "order_id"}


def bearer(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def post(client: Client, url: str, data: Any) -> Any:
    return client.post(url, data=json.dumps(data), content_type="application/json")


def finished(run_id: int) -> dict[str, dict[str, Any]]:
    """tool -> its tool_call_finished data."""
    rows = RunEvent.objects.filter(run_id=run_id, type="tool_call_finished").order_by("seq")
    return {e.data["tool"]: e.data for e in rows}


def test_a_dry_run_executes_no_write_and_asks_nobody(people, scripted, enqueued) -> None:
    client = bearer(people["operator"])
    response = post(client, "/api/runs", {"task": "Refund A1", "mode": "dry"})
    assert response.status_code == 201 and response.json()["mode"] == "dry"
    scripted.enqueue(
        call("lookup", order_id="A1"),
        [call("pay_out", order_id="A1", amount=50), call("note", customer_id="C1", text="x")],
        "Refunded 50.",
    )
    run_id = response.json()["id"]
    assert engine.execute_run(run_id) == "succeeded"
    assert sample_tools.SIDE_EFFECTS["A1"] == 0 and sample_tools.SIDE_EFFECTS["note:C1"] == 0
    assert not Approval.objects.filter(run_id=run_id).exists()
    assert list(ToolExecution.objects.filter(run_id=run_id).values_list("tool", flat=True)) == [
        "lookup"
    ]  # the read ran; nothing else was even journaled
    done = finished(run_id)
    assert done["lookup"]["result"]["status"] == "delivered" and "dry" not in done["lookup"]
    assert done["pay_out"]["ok"] is True and done["pay_out"]["dry"] is True
    assert done["pay_out"]["result"] == {
        "dry_run": True,
        "would_call": "pay_out",
        "arguments": {"order_id": "A1", "amount": 50.0},
    }
    assert done["note"]["result"]["would_call"] == "note"
    started = RunEvent.objects.filter(run_id=run_id, type="tool_call_started", data__tool="pay_out")
    assert started.get().data["dry"] is True and "approval" not in started.get().data
    # what the model read back for the call: the same record
    said = [m for m in scripted.requests[2].messages if getattr(m, "call_id", None)]
    assert any('"would_call": "pay_out"' in m.content for m in said)
    body = client.get(f"/api/runs/{run_id}").json()
    assert body["mode"] == "dry" and body["actions"] == []


def test_a_low_risk_tool_a_rule_gives_to_a_person_is_not_run_either(people, scripted, enqueued):
    profiles.save_profile(
        {
            "name": "careful",
            "system_prompt": "p",
            "allowed_tools": ["lookup", "pay_out"],
            "approval_policies": {"lookup": "always"},
        }
    )
    run = actions.do_create_run(user=people["operator"], task="x", agent_name="careful", mode="dry")
    scripted.enqueue(call("lookup", order_id="A1"), "ok")
    assert engine.execute_run(run.pk) == "succeeded"
    assert finished(run.pk)["lookup"]["dry"] is True
    assert not ToolExecution.objects.filter(run=run).exists()
    assert not Approval.objects.exists()


def _ticket() -> Any:
    from agentweb.shop.models import Customer
    from tests.tickets.factories import make_ticket

    customer = Customer.objects.create(
        code="C9", name="Grace", email="g@example.com", created_at=timezone.now()
    )
    return make_ticket("Broken mug", "It arrived broken.", customer=customer)


def test_a_dry_run_is_not_the_tickets_active_run(people, scripted, enqueued) -> None:
    ticket = _ticket()
    client = bearer(people["operator"])
    dry = post(client, "/api/runs", {"ticket": ticket.pk, "mode": "dry"})
    assert dry.status_code == 201
    real = post(client, "/api/runs", {"ticket": ticket.pk})
    assert real.status_code == 201  # the dry run does not make the ticket busy
    again_dry = post(client, "/api/runs", {"ticket": ticket.pk, "mode": "dry"})
    assert again_dry.status_code == 201  # nor does the real one stop a dry run
    busy = post(client, "/api/runs", {"ticket": ticket.pk})
    assert busy.status_code == 409 and busy.json()["active_run"] == real.json()["id"]
    assert actions.active_run_for_ticket(ticket.pk) == real.json()["id"]


def test_a_dry_run_adds_nothing_to_a_policy_total(people, scripted, enqueued) -> None:
    profiles.save_profile(
        {
            "name": "payer",
            "system_prompt": "p",
            "allowed_tools": ["pay_out"],
            "risk_overrides": {"pay_out": "medium"},
            "approval_policies": {"pay_out": RULE},
        }
    )
    operator = people["operator"]
    # A dry run "pays" 15 on A7 twice: below 20 each, and neither counts afterwards.
    dry = actions.do_create_run(user=operator, task="x", agent_name="payer", mode="dry")
    scripted.enqueue(call("pay_out", order_id="A7", amount=15), "ok")
    engine.execute_run(dry.pk)
    dry2 = actions.do_create_run(user=operator, task="x", agent_name="payer", mode="dry")
    scripted.enqueue(call("pay_out", order_id="A7", amount=15), "ok")
    engine.execute_run(dry2.pk)
    assert sample_tools.SIDE_EFFECTS["A7"] == 0
    # A real 15 on A7 still runs without a person: the total is 15, not 45.
    real = actions.do_create_run(user=operator, task="x", agent_name="payer")
    scripted.enqueue(call("pay_out", order_id="A7", amount=15), "paid")
    assert engine.execute_run(real.pk) == "succeeded"
    assert sample_tools.SIDE_EFFECTS["A7"] == 1
    # ... and a dry 10 after it is recorded as would-call with no approval asked,
    # though a real one would need a person (15 + 10 >= 20).
    dry3 = actions.do_create_run(user=operator, task="x", agent_name="payer", mode="dry")
    scripted.enqueue(call("pay_out", order_id="A7", amount=10), "ok")
    assert engine.execute_run(dry3.pk) == "succeeded"
    assert finished(dry3.pk)["pay_out"]["dry"] is True
    real2 = actions.do_create_run(user=operator, task="x", agent_name="payer")
    scripted.enqueue(call("pay_out", order_id="A7", amount=10))
    assert engine.execute_run(real2.pk) == "waiting_approval"
    assert Approval.objects.get().run_id == real2.pk


def test_dry_runs_are_labelled_on_the_pages(people, scripted, enqueued) -> None:
    ticket = _ticket()
    page = Client()
    page.force_login(people["operator"])
    response = page.post(f"/tickets/{ticket.pk}/run/", {"mode": "dry"})
    assert response.status_code == 302
    run = Run.objects.get(ticket=ticket)
    assert run.mode == "dry"
    scripted.enqueue([call("pay_out", order_id="A1", amount=5)], "done")
    engine.execute_run(run.pk)
    for url in (f"/runs/{run.pk}/", "/runs/", "/tickets/"):
        body = page.get(url).content.decode()
        assert 'class="badge dry"' in body, url
    detail = page.get(f"/runs/{run.pk}/").content.decode()
    assert "would call: not executed" in detail
    plain = page.post("/runs/new/", {"task": "hello"})
    normal = Run.objects.get(pk=int(plain["Location"].rstrip("/").split("/")[-1]))
    assert normal.mode == "normal"
    assert 'class="badge dry"' not in page.get(f"/runs/{normal.pk}/").content.decode()


def test_mode_must_be_normal_or_dry(people, enqueued) -> None:
    response = post(bearer(people["operator"]), "/api/runs", {"task": "x", "mode": "wet"})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "mode must be 'normal' or 'dry'"
    assert not Run.objects.exists()


def test_the_demo_model_plays_a_dry_refund_to_its_end(people, enqueued, settings) -> None:
    """The scripted demo reads a would-call's arguments as the refund's result (it read
    result['amount'] of the dry-run record and the run hung at its next model call)."""
    from django.core.management import call_command

    settings.AGENTWEB_MODEL = "demo"
    call_command("seed_demo")
    task = "Refund the cracked teapot on A1001"
    run = actions.do_create_run(user=people["operator"], task=task, mode="dry")
    assert engine.execute_run(run.pk) == "succeeded"
    assert finished(run.pk)["issue_refund"]["dry"] is True
