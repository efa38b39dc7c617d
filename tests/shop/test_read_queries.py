"""The read tools that send SQL the ORM compiled once tell what the ORM's own queries tell.

``get_order`` reads an order, its customer, refunds, items, payments and shipments in one
round trip; ``check_inventory`` reads a product by its SKU with a query compiled once.
Each answer is compared with the one built from the ORM's own queries, over the demo
seed's every order and product (refunds, several shipments, cancelled orders included).
"""

from __future__ import annotations

import os
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentweb.shop.actions import ShopRuleError, find_order
from agentweb.shop.models import InventoryItem, Order, Refund
from tools.ticket import read

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTWEB_DEMO_PASSWORD", "demo-password")
    with open(os.devnull, "w") as quiet:
        call_command("seed_demo", stdout=quiet)


def _by_the_orm(number: str) -> dict:
    """``get_order``'s answer with every related row read by the ORM, one query each."""
    return read.describe_order(find_order(number))


def test_get_order_tells_what_the_orms_own_queries_tell_in_one_round_trip(seeded):
    order = Order.objects.filter(shipments__isnull=False).order_by("number").first()
    assert order is not None
    for n, amount in enumerate(("1.50", "2.25")):
        Refund.objects.create(
            order=order,
            amount=Decimal(amount),
            reason="goodwill",
            idempotency_key=f"test:{n}",
            created_at=timezone.now(),
        )
    numbers = list(Order.objects.order_by("number").values_list("number", flat=True))
    assert len(numbers) >= 10
    told_refunds = told_shipments = 0
    for number in numbers:
        expected = _by_the_orm(number)
        with CaptureQueriesContext(connection) as sent:
            got = read.get_order.fn(order_id=f"  {number.lower()} ")
        assert got == expected, number
        assert len(sent) == 1, number
        told_refunds += bool(got["refunds"])
        told_shipments += bool(got["shipments"])
    assert told_refunds and told_shipments  # the comparison covered both kinds of rows


def test_get_order_of_an_unknown_number_is_the_shops_own_refusal(seeded):
    with pytest.raises(ShopRuleError, match=r"No order with id 'A0000'.*look like 'A1001'"):
        read.get_order.fn(order_id="A0000")


def test_check_inventory_tells_what_the_orm_reads(seeded):
    items = list(InventoryItem.objects.order_by("sku"))
    assert items
    for item in items:
        with CaptureQueriesContext(connection) as sent:
            got = read.check_inventory.fn(sku=item.sku.lower())
        assert len(sent) == 1
        assert got == {
            "sku": item.sku,
            "name": item.name,
            "price": f"{item.price:.2f}",
            "on_hand": item.on_hand,
            "reserved": item.reserved,
            "available": item.available,
            "in_stock": item.available > 0,
            "restock_date": item.restock_date.isoformat() if item.restock_date else None,
        }
