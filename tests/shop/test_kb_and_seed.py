"""Knowledge-base search (PostgreSQL full text, ranked) and the demo seed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection

from agentweb.shop import demo_data
from agentweb.shop.actions import ShopRuleError
from agentweb.shop.models import (
    Customer,
    CustomerFact,
    CustomerNote,
    InventoryItem,
    KBArticle,
    Order,
    Shipment,
)
from agentweb.tickets.models import Ticket
from tools.ticket.demo import scenario_for

NOW = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def kb(db):
    def article(slug, title, body, category="Help"):
        KBArticle.objects.create(
            slug=slug, title=title, body=body, category=category, updated_at=NOW
        )

    article("return-policy", "Return policy", "Return unused items within 30 days for a refund.")
    article("refund-timelines", "Refund timelines", "A refund shows within 5 business days.")
    article("shipping-rates", "Shipping rates", "Standard shipping costs 5.99.")
    article("gift-cards", "Gift cards", "Gift cards never expire. Returns of gift cards: none.")


def test_it_ranks_title_matches_first(kb, call):
    results = call("search_kb", query="return policy")["results"]
    slugs = [r["slug"] for r in results]
    assert slugs[0] == "return-policy"
    assert "shipping-rates" not in slugs
    assert results[0]["rank"] > results[-1]["rank"]


def test_it_matches_any_word_with_stemming(kb, call):
    slugs = [r["slug"] for r in call("search_kb", query="refunds returning")["results"]]
    # Both words stem to what the two refund articles hold; the title match ranks first.
    assert slugs[0] == "return-policy"
    assert "refund-timelines" in slugs
    assert "shipping-rates" not in slugs


def test_it_returns_an_excerpt_and_the_article(kb, call):
    top = call("search_kb", query="shipping cost")["results"][0]
    assert top["slug"] == "shipping-rates"
    assert "5.99" in top["body"]
    assert "shipping" in top["excerpt"].lower()


def test_it_finds_nothing_quietly_and_refuses_an_empty_query(kb, call):
    assert call("search_kb", query="xylophone")["results"] == []
    with pytest.raises(ShopRuleError, match="no words"):
        call("search_kb", query="?!")


def test_it_indexes_the_kb_for_full_text_search(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'shop_kb_fts_gin'")
        (definition,) = cursor.fetchone()
    assert "gin" in definition.lower() and "(document)" in definition
    with connection.cursor() as cursor:  # the document is stored, made as rows are written
        cursor.execute(
            "SELECT generation_expression FROM information_schema.columns "
            "WHERE table_name = 'shop_kbarticle' AND column_name = 'document'"
        )
        (expression,) = cursor.fetchone()
    assert "to_tsvector" in expression and "setweight" in expression


# --- seed -----------------------------------------------------------------------------


def _fingerprint():
    return {
        "customers": list(Customer.objects.values_list("code", "name", "email", "address")),
        "orders": list(
            Order.objects.order_by("number").values_list(
                "number", "customer__code", "status", "total", "captured_amount", "placed_at"
            )
        ),
        "tracking": list(
            Shipment.objects.order_by("tracking_number").values_list(
                "tracking_number", "order__number", "status"
            )
        ),
        "tickets": sorted(
            Ticket.objects.values_list("fields__customer_id", "subject", "status", "created_at")
        ),
        "stock": list(InventoryItem.objects.values_list("sku", "on_hand", "restock_date")),
    }


def _wipe():
    from agentweb.shop import models as m

    for model in (
        Ticket, m.Refund, m.CustomerFact, m.CustomerNote, m.Order,
        m.Customer, m.InventoryItem, m.KBArticle,
    ):  # fmt: skip
        model.objects.all().delete()


def test_it_seeds_enough_varied_data(db):
    counts = demo_data.seed_shop()
    assert counts["customers"] >= 50
    assert counts["orders"] >= 200
    assert counts["kb_articles"] >= 30
    assert counts["open_tickets"] >= 20
    statuses = set(Order.objects.values_list("status", flat=True))
    assert statuses == {"pending", "paid", "shipped", "delivered", "cancelled"}
    assert set(Shipment.objects.values_list("carrier", flat=True)) == {"UPS", "FedEx", "USPS"}
    assert InventoryItem.objects.filter(on_hand=0).exists()
    assert CustomerNote.objects.exists() and CustomerFact.objects.exists()
    assert all(t.startswith("1Z") for t in Shipment.objects.filter(carrier="UPS")
               .values_list("tracking_number", flat=True))  # fmt: skip


def test_it_seeds_idempotently(db):
    first = demo_data.seed_shop()
    before = _fingerprint()
    assert demo_data.seed_shop() == first
    assert _fingerprint() == before


def test_it_seeds_deterministically(db):
    demo_data.seed_shop()
    before = _fingerprint()
    _wipe()
    assert not Order.objects.exists()
    demo_data.seed_shop()
    assert _fingerprint() == before


def test_it_opens_tickets_for_every_scenario(db):
    demo_data.seed_shop()
    played = {
        scenario_for(f"{t.subject}\n\n{t.first_body()}")
        for t in Ticket.objects.filter(status=Ticket.Status.OPEN)
    }
    assert played == {
        "not_received", "where_is", "damaged", "cancel", "address", "stock",
        "duplicate_charge", "angry", "policy_refund", "general",
    }  # fmt: skip


def test_it_keeps_open_tickets_consistent_with_their_orders(db):
    demo_data.seed_shop()
    for ticket in Ticket.objects.filter(status="open"):
        assert ticket.source == "demo"
        customer = Customer.objects.get(code=ticket.customer_id)
        assert (ticket.requester_email, ticket.requester_name) == (customer.email, customer.name)
        number = ticket.fields.get("order_id")
        if number is not None:
            assert number in ticket.first_body()
            assert Order.objects.get(number=number).customer == customer
    assert Order.objects.get(number="A1017").payments.count() == 2
    assert Order.objects.get(number="A1008").status == "paid"
    assert Order.objects.get(number="A1010").status == "shipped"


def test_it_reseeds_a_database_whose_numbers_an_older_plan_took(db):
    """A database seeded by an older plan may hold the payment reference and tracking number
    this plan draws for an order added since: re-seeding must still work (make run re-seeds
    at every start)."""
    from agentweb.shop.models import Payment

    demo_data.seed_shop()
    added = Order.objects.get(number="A1026")
    refs = list(Payment.objects.filter(order=added).values_list("reference", flat=True))
    tracking = Shipment.objects.filter(order=added).first().tracking_number
    added.delete()
    older = Order.objects.exclude(number="A1026").filter(shipments__isnull=False).first()
    Payment.objects.filter(order=older).update(reference=refs[0])
    Shipment.objects.filter(pk=Shipment.objects.filter(order=older).first().pk).update(
        tracking_number=tracking
    )

    demo_data.seed_shop()

    again = Order.objects.get(number="A1026")
    new_refs = set(Payment.objects.filter(order=again).values_list("reference", flat=True))
    assert len(new_refs) == len(refs) and refs[0] not in new_refs
    assert Shipment.objects.filter(order=again).first().tracking_number != tracking
