"""Fixtures for the demo shop: a small hand-built shop, the full seed, and a tool caller."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from agentweb.runtime.tools import ToolContext, ToolRegistry, load_tools
from agentweb.shop.models import (
    Customer,
    InventoryItem,
    Order,
    OrderItem,
    Payment,
    Shipment,
    ShipmentEvent,
)
from tests.tickets.factories import make_ticket

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="session", autouse=True)
def _close_pool_connections(django_db_setup: None) -> Iterator[None]:
    """Tools keep a DB connection per pool thread; close them so the test DB can be dropped."""
    yield
    from django.db import connection

    from agentweb.runtime.execution import shared_pool

    pool = shared_pool()
    workers = [t for t in threading.enumerate() if t.name.startswith("agentweb-tool")]
    if not workers:
        return
    barrier = threading.Barrier(len(workers), timeout=10)

    def close() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()  # one task per thread: every worker is busy at once
        connection.close()

    for future in [pool.submit(close) for _ in workers]:
        future.result()


@pytest.fixture(scope="session")
def registry() -> ToolRegistry:
    return load_tools(["tools.ticket"])


def make_customer(code: str = "C001", name: str = "Ada Lovelace") -> Customer:
    return Customer.objects.create(
        code=code,
        name=name,
        email=f"{code.lower()}@example.com",
        address="1 Old Road, Springfield, IL 62701, USA",
        created_at=T0,
    )


def make_order(
    customer: Customer,
    number: str = "A1001",
    *,
    status: str = "paid",
    price: str = "50.00",
    captures: int = 1,
) -> Order:
    total = Decimal(price)
    order = Order.objects.create(
        number=number,
        customer=customer,
        status=status,
        subtotal=total,
        total=total,
        captured_amount=total * captures,
        shipping_address=customer.address,
        placed_at=T0,
    )
    OrderItem.objects.create(
        order=order, sku="KIT-0101", name="Stoneware Teapot", quantity=1, unit_price=total
    )
    for n in range(captures):
        Payment.objects.create(
            order=order, reference=f"ch_{number}_{n}", amount=total, captured_at=T0
        )
    return order


def make_shipment(order: Order, tracking: str, status: str = "in_transit") -> Shipment:
    shipment = Shipment.objects.create(
        order=order, carrier="UPS", tracking_number=tracking, status=status, shipped_at=T0
    )
    ShipmentEvent.objects.create(
        shipment=shipment,
        at=T0 + timedelta(hours=3),
        status=status,
        location="Louisville, KY",
        description="Arrived at hub",
    )
    return shipment


@pytest.fixture
def shop(db: None) -> dict[str, Any]:
    """Two customers; a paid, a shipped, a delivered and a pending order; a ticket; stock."""
    ada = make_customer("C001", "Ada Lovelace")
    bob = make_customer("C002", "Bob Noyce")
    paid = make_order(ada, "A1001", status="paid")
    shipped = make_order(ada, "A1002", status="shipped")
    delivered = make_order(ada, "A1003", status="delivered", price="80.00")
    pending = Order.objects.create(
        number="A1004",
        customer=bob,
        status="pending",
        subtotal=Decimal("30.00"),
        total=Decimal("30.00"),
        shipping_address=bob.address,
        placed_at=T0,
    )
    label = make_order(bob, "A1005", status="paid")
    make_shipment(shipped, "1ZAAAAAA0300000001", "in_transit")
    make_shipment(delivered, "1ZAAAAAA0300000002", "delivered")
    make_shipment(label, "1ZAAAAAA0300000003", "label_created")
    ticket = make_ticket("Where is my teapot?", "Order A1002", customer=ada, order=shipped, at=T0)
    InventoryItem.objects.create(
        sku="KIT-0101", name="Stoneware Teapot", price=Decimal("38.00"), on_hand=0
    )
    return {
        "ada": ada,
        "bob": bob,
        "paid": paid,
        "shipped": shipped,
        "delivered": delivered,
        "pending": pending,
        "label": label,
        "ticket": ticket,
    }


Call = Callable[..., Any]


@pytest.fixture
def call(registry: ToolRegistry) -> Call:
    """Call a tool as the runtime does: validated arguments, a ToolContext for ctx."""

    def run(
        name: str,
        *,
        call_id: str = "call_1",
        run_id: str | None = "run1",
        ticket_id: str | None = None,
        **arguments: Any,
    ) -> Any:
        tool = registry.get(name)
        parsed = tool.parse(arguments)
        ctx = ToolContext(call_id=call_id, run_id=run_id, subject=ticket_id)
        return tool.fn(**tool.call_kwargs(parsed, ctx))

    return run
