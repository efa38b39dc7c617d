"""Rules that start runs (DESIGN §11): per queue or tag, auto or suggest, from the setting
and /admin/; one active run per ticket still holds."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from agentweb import signing
from agentweb.runs.models import Run
from agentweb.tickets import actions, intake
from agentweb.tickets.config import IntakeRule as Rule
from agentweb.tickets.config import parse_intake_rules
from agentweb.tickets.models import IntakeRule, Ticket
from tests.tickets.conftest import bearer, send


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from agentweb.runs import queue

    sent: list[int] = []
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: sent.append(run_id))
    return sent


@pytest.fixture
def auto_shipping(settings: Any) -> None:
    settings.AGENTWEB_INTAKE_RULES = (
        Rule(agent="ticket-assistant", mode="auto", queue="shipping"),
        Rule(agent="triage", mode="suggest", tag="vip"),
    )


def arrive(client: Any, external_id: str, body: str = "Where is it?", **extra: Any) -> int:
    response = send(
        client,
        "post",
        "/api/tickets",
        {"source": "desk", "external_id": external_id, "subject": "Late", "body": body, **extra},
    )
    assert response.status_code in (200, 201), response.json()
    return int(response.json()["id"])


def test_an_auto_rule_starts_a_run_when_a_ticket_arrives(
    people: dict, auto_shipping: None, enqueued: list[int]
) -> None:
    client = bearer(people["operator"])
    ticket_id = arrive(client, "T-1", queue="shipping")
    run = Run.objects.get(ticket_id=ticket_id)
    assert run.agent.name == "ticket-assistant" and run.status == "queued"
    assert run.created_by.username == "intake" and not run.created_by.has_usable_password()
    assert run.task.startswith(f"Handle ticket #{ticket_id}: Late")
    assert enqueued == [run.pk]
    assert client.get(f"/api/tickets/{ticket_id}").json()["active_run"] == run.pk
    # other queues, suggest rules: no run
    arrive(client, "T-2", queue="billing", tags=["vip"])
    assert Run.objects.count() == 1


def test_one_active_run_per_ticket_holds_and_a_later_message_starts_the_next(
    people: dict, auto_shipping: None, enqueued: list[int]
) -> None:
    client = bearer(people["operator"])
    ticket_id = arrive(client, "T-1", queue="shipping")
    arrive(client, "T-1", "Any news?", queue="shipping")  # the customer wrote again
    assert Run.objects.filter(ticket_id=ticket_id).count() == 1
    Run.objects.update(status="succeeded")
    send(client, "patch", f"/api/tickets/{ticket_id}", {"tags": ["x"]})  # no message: no run
    assert Run.objects.count() == 1
    arrive(client, "T-1", "Hello? Still waiting.", queue="shipping")
    assert Run.objects.filter(ticket_id=ticket_id).count() == 2
    Run.objects.update(status="succeeded")
    Ticket.objects.filter(pk=ticket_id).update(status="closed")
    arrive(client, "T-1", "One more thing", queue="shipping")
    assert Run.objects.count() == 2  # a closed ticket starts nothing


def test_messages_arriving_at_once_start_one_run(
    people: dict, auto_shipping: None, enqueued: list[int]
) -> None:
    ticket = actions.do_receive_ticket(
        actions.Incoming(source="desk", external_id="T-9", subject="x", queue="shipping")
    ).ticket
    Run.objects.all().delete()
    barrier = threading.Barrier(6)

    def write(n: int) -> None:
        try:
            barrier.wait()
            actions.do_add_incoming(
                ticket.pk, actions.Incoming(source="desk", subject="x", body=f"message {n}")
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ticket.messages.count() == 6
    assert Run.objects.filter(ticket=ticket).count() == 1


def test_rules_from_the_admin_apply_after_the_settings_and_can_be_switched_off(
    people: dict, settings: Any, enqueued: list[int]
) -> None:
    settings.AGENTWEB_INTAKE_RULES = ()
    rule = IntakeRule.objects.create(agent="triage", mode="auto", tag="urgent")
    client = bearer(people["operator"])
    urgent = arrive(client, "T-1", tags=["urgent", "late"])
    assert Run.objects.get(ticket_id=urgent).agent.name == "triage"
    rule.enabled = False
    rule.save()
    arrive(client, "T-2", tags=["urgent"])
    assert Run.objects.count() == 1
    settings.AGENTWEB_INTAKE_RULES = (Rule(agent="ticket-assistant", mode="auto"),)
    rule.enabled = True
    rule.save()
    first = arrive(client, "T-3", tags=["urgent"])
    assert Run.objects.get(ticket_id=first).agent.name == "ticket-assistant"  # the setting's first


def test_a_rule_naming_no_profile_logs_and_stores_the_ticket(
    people: dict, settings: Any, enqueued: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    settings.AGENTWEB_INTAKE_RULES = (Rule(agent="gone", mode="auto"),)
    caplog.set_level(logging.WARNING, logger="agentweb.tickets.intake")
    ticket_id = arrive(bearer(people["operator"]), "T-1")
    assert Ticket.objects.filter(pk=ticket_id).exists() and not Run.objects.exists()
    assert any("unknown agent 'gone'" in r.getMessage() for r in caplog.records)


def test_a_signed_webhook_delivery_starts_the_run(
    people: dict, auto_shipping: None, enqueued: list[int]
) -> None:
    from django.test import Client

    _, secret = actions.do_add_source("helpdesk", kind="generic")
    body = json.dumps(
        {
            "event": "ticket.created",
            "delivery_id": "d-1",
            "ticket": {"external_id": "HD-1", "subject": "Late", "queue": "shipping"},
            "message": {"body": "Where is my parcel?"},
        }
    ).encode()
    response = Client().post(
        "/hooks/tickets/helpdesk",
        data=body,
        content_type="application/json",
        headers=signing.agentweb_headers(secret, body),
    )
    assert response.status_code == 202
    run = Run.objects.get(ticket_id=response.json()["ticket"])
    assert enqueued == [run.pk]


def test_suggested_agents_are_what_the_ticket_page_offers(
    people: dict, auto_shipping: None, enqueued: list[int]
) -> None:
    ticket = actions.do_receive_ticket(
        actions.Incoming(source="desk", subject="x", queue="shipping", tags=["vip"])
    ).ticket
    assert intake.suggested_agents(ticket) == ["ticket-assistant", "triage"]
    IntakeRule.objects.create(agent="nobody-by-this-name", mode="suggest")
    assert intake.suggested_agents(ticket) == ["ticket-assistant", "triage"]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("{", "not JSON"),
        ('{"agent": "x", "mode": "auto"}', "JSON list"),
        ('[{"agent": "x", "mode": "sometimes"}]', 'mode must be "auto" or "suggest"'),
        ('[{"mode": "auto"}]', "agent must name an agent profile"),
        ('[{"agent": "x", "mode": "auto", "team": "a"}]', "unknown key 'team'"),
        ('[{"agent": "x", "mode": "auto", "queue": 3}]', "must be strings"),
    ],
)
def test_bad_rules_stop_start_up_naming_the_variable(value: str, words: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="AGENTWEB_INTAKE_RULES") as raised:
        parse_intake_rules(value)
    assert words in str(raised.value)
