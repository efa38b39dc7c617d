"""The shop's tickets move to agentweb.tickets with their ids, so runs keep their ticket."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("shop", "0002_shop_domain"), ("runs", "0008_sum_per_keys"), ("tickets", None)]
AFTER = [("shop", "0003_tickets_moved"), ("runs", "0009_alter_run_ticket")]
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


@pytest.fixture
def old_state(transactional_db: None) -> Iterator[Any]:
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(BEFORE)
        yield executor.loader.project_state([n for n in BEFORE if n[1]]).apps
    finally:  # back to the latest state, for the tests after this one
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_it_moves_tickets_replies_and_keeps_runs_on_their_ticket(old_state: Any) -> None:
    apps = old_state
    Customer = apps.get_model("shop", "Customer")
    Order = apps.get_model("shop", "Order")
    ShopTicket = apps.get_model("shop", "Ticket")
    CustomerReply = apps.get_model("shop", "CustomerReply")
    User = apps.get_model("auth", "User")
    Profile = apps.get_model("runs", "AgentProfile")
    Run = apps.get_model("runs", "Run")

    ada = Customer.objects.create(
        code="C001", name="Ada <b>Lovelace</b>", email="ada@example.com", created_at=T0
    )
    order = Order.objects.create(
        number="A1001",
        customer=ada,
        subtotal=10,
        total=10,
        shipping_address="1 Road",
        placed_at=T0,
    )
    with_order = ShopTicket.objects.create(
        id=41, subject="Late", body="Where is A1001?", customer=ada, order=order, created_at=T0
    )
    ShopTicket.objects.create(
        id=57, subject="Hello", body="A question", customer=ada, status="closed", created_at=T0
    )
    CustomerReply.objects.create(
        customer=ada, ticket=with_order, message="On its way", sent_at=T0 + timedelta(hours=1)
    )
    CustomerReply.objects.create(customer=ada, message="No ticket", sent_at=T0)
    user = User.objects.create(username="op")
    profile = Profile.objects.create(name="p", system_prompt="x")
    run = Run.objects.create(task="t", agent=profile, ticket=with_order, created_by=user)

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    apps = executor.loader.project_state(AFTER).apps
    Ticket = apps.get_model("tickets", "Ticket")
    Message = apps.get_model("tickets", "Message")

    moved = Ticket.objects.get(pk=41)
    assert moved.source == "demo" and moved.subject == "Late" and moved.status == "open"
    assert moved.fields == {"customer_id": "C001", "order_id": "A1001"}
    assert (moved.requester_email, moved.requester_name) == ("ada@example.com", ada.name)
    assert moved.updated_at == T0 + timedelta(hours=1)
    thread = list(Message.objects.filter(ticket=moved).order_by("at"))
    assert [(m.direction, m.body) for m in thread] == [
        ("in", "Where is A1001?"),
        ("out", "On its way"),
    ]
    assert Ticket.objects.get(pk=57).fields == {"customer_id": "C001"}
    assert Ticket.objects.get(pk=57).status == "closed"
    orphan = Ticket.objects.exclude(pk__in=[41, 57]).get()
    assert orphan.source == "api" and orphan.pk > 57  # the sequence moved past copied ids
    assert [m.body for m in Message.objects.filter(ticket=orphan)] == ["No ticket"]
    assert apps.get_model("runs", "Run").objects.get(pk=run.pk).ticket_id == 41
    new = Ticket.objects.create(subject="new")
    assert new.pk > orphan.pk
