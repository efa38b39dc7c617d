"""Read-only ticket tools (low risk, no approval, safe to repeat)."""

from __future__ import annotations

import functools
import re
from types import SimpleNamespace
from typing import Any

import psycopg
from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db import connection, models
from django.db.models import F

from agentweb.runtime.tools import tool
from agentweb.shop.actions import (
    ShopRuleError,
    find_customer,
    find_order,
    find_shipment,
    money,
    normalise_code,
)
from agentweb.shop.models import (
    ZERO,
    Customer,
    InventoryItem,
    KBArticle,
    Order,
    OrderItem,
    Payment,
    Refund,
    Shipment,
)
from agentweb.tickets.models import Ticket

KB_RESULTS = 5
KB_BODY_CHARS = 1200


def _date(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


#: An order's rows of each kind, by the name ``describe_order`` reads them under.
_CHILDREN: tuple[tuple[str, type[models.Model]], ...] = (
    ("refunds", Refund),
    ("items", OrderItem),
    ("payments", Payment),
    ("shipments", Shipment),
)


def _filled(template: tuple[Any, ...], stand_in: str, value: Any) -> list[Any]:
    """The parameters of a query compiled once (``_order_query``, ``_item_query``,
    ``_kb_query``), ``value`` where the compiled query had ``stand_in``."""
    return [value if p == stand_in else p for p in template]


#: Stands for the order's number while the queries are compiled (``_order_query``).
_ANY_NUMBER = "\x00number\x00"


@functools.cache
def _order_query() -> tuple[str, tuple[Any, ...], tuple[list[str], ...]]:
    """One string of five SELECTs the ORM compiles once: the order with its customer (as
    ``find_order`` reads it), then its refunds, items, payments and shipments (each in its
    model's order, found by the order's number), with ``_ANY_NUMBER`` where the number
    goes; and the columns each returns (the order's and the customer's for the first).
    Compiling these cost a call more time than PostgreSQL took to answer them."""
    first = Order.objects.select_related("customer").filter(number=_ANY_NUMBER)
    queries = [first] + [
        model._default_manager.filter(order__number=_ANY_NUMBER) for _, model in _CHILDREN
    ]
    sqls: list[str] = []
    params: list[Any] = []
    for query in queries:
        sql, values = query.query.sql_with_params()
        sqls.append(sql)
        params.extend(values)
    columns = [[f.attname for f in m._meta.concrete_fields] for m in (Order, Customer)]
    columns += [[f.attname for f in model._meta.concrete_fields] for _, model in _CHILDREN]
    return "; ".join(sqls), tuple(params), tuple(columns)


def _read_order(order_id: str) -> Order:
    """``find_order`` and the order's refunds, items, payments and shipments in its
    prefetch cache (which ``order.refunds.all()`` and the like then read), in one round
    trip where the cursor binds on the client."""
    with connection.cursor() as cursor:
        if isinstance(cursor.cursor, psycopg.ClientCursor):
            sql, template, columns = _order_query()
            cursor.execute(sql, _filled(template, _ANY_NUMBER, normalise_code(order_id)))
            found = cursor.fetchall()
            if found:
                split = len(columns[0])
                order = Order.from_db(connection.alias, columns[0], found[0][:split])
                customer = Customer.from_db(connection.alias, columns[1], found[0][split:])
                Order.customer.field.set_cached_value(order, customer)
                cache = {}
                for (name, model), names in zip(_CHILDREN, columns[2:], strict=True):
                    cursor.nextset()
                    rows = cursor.fetchall()
                    cache[name] = [model.from_db(connection.alias, names, r) for r in rows]
                order._prefetched_objects_cache = cache  # type: ignore[attr-defined]
                return order
    # The ORM's own queries, one by one (a cursor that binds on the server), or the
    # shop's own answer to a number it does not know.
    order = find_order(order_id)
    order._prefetched_objects_cache = {  # type: ignore[attr-defined]
        name: list(getattr(order, name).all()) for name, _ in _CHILDREN
    }
    return order


def describe_order(order: Order) -> dict[str, Any]:
    """An order as ``get_order`` tells it; its related rows read as ``_read_order`` leaves
    them (or by the ORM, one query each, for an order read otherwise)."""
    refunds = list(order.refunds.all())  # one query for the list and the sum
    refunded = sum((r.amount for r in refunds), ZERO)
    return {
        "order_id": order.number,
        "customer_id": order.customer.code,
        "customer_name": order.customer.name,
        "status": order.status,
        "placed_at": order.placed_at.isoformat(),
        "currency": order.currency,
        "items": [
            {
                "sku": item.sku,
                "name": item.name,
                "quantity": item.quantity,
                "unit_price": money(item.unit_price),
            }
            for item in order.items.all()
        ],
        "subtotal": money(order.subtotal),
        "shipping_cost": money(order.shipping_cost),
        "total": money(order.total),
        "payments": [
            {
                "reference": p.reference,
                "amount": money(p.amount),
                "method": p.method,
                "captured_at": p.captured_at.isoformat(),
            }
            for p in order.payments.all()
        ],
        "captured_amount": money(order.captured_amount),
        "refunded_amount": money(refunded),
        "refundable_amount": money(max(order.captured_amount - refunded, ZERO)),
        "refunds": [
            {"amount": money(r.amount), "reason": r.reason, "created_at": r.created_at.isoformat()}
            for r in refunds
        ],
        "shipping_address": order.shipping_address,
        "shipments": [
            {
                "carrier": s.carrier,
                "tracking_number": s.tracking_number,
                "status": s.status,
                "delivered_at": _date(s.delivered_at),
            }
            for s in order.shipments.all()
        ],
        "cancelled_at": _date(order.cancelled_at),
        "can_cancel_or_change_address": order.before_shipping,
    }


@tool(risk="low", read_only=True)
def get_order(order_id: str) -> dict[str, Any]:
    """Look up an order: status, items, amounts captured and refunded, address, shipments.

    Args:
        order_id: The order id the customer sees, e.g. "A1001".
    """
    return describe_order(_read_order(order_id))


@tool(risk="low", read_only=True)
def track_shipment(tracking_number: str) -> dict[str, Any]:
    """Track a parcel: carrier status, delivery estimate and the carrier's scan events.

    Args:
        tracking_number: The carrier tracking number, e.g. "1Z999AA10123456784".
    """
    shipment = find_shipment(tracking_number)
    return {
        "tracking_number": shipment.tracking_number,
        "carrier": shipment.carrier,
        "order_id": shipment.order.number,
        "status": shipment.status,
        "shipped_at": shipment.shipped_at.isoformat(),
        "estimated_delivery": _date(shipment.estimated_delivery),
        "delivered_at": _date(shipment.delivered_at),
        "events": [
            {
                "at": e.at.isoformat(),
                "status": e.status,
                "location": e.location,
                "description": e.description,
            }
            for e in shipment.events.all()
        ],
        "escalations": [
            {
                "escalation_id": x.reference,
                "status": x.status,
                "reason": x.reason,
                "created_at": x.created_at.isoformat(),
            }
            for x in shipment.escalations.all()
        ],
    }


@tool(risk="low", read_only=True)
def get_customer(customer_id: str) -> dict[str, Any]:
    """Look up a customer: contact details, tier, default address and recent orders.

    Args:
        customer_id: The customer id, e.g. "C001".
    """
    customer = find_customer(customer_id)
    orders = list(customer.orders.all()[:10])
    return {
        "customer_id": customer.code,
        "name": customer.name,
        "email": customer.email,
        "phone": customer.phone,
        "tier": customer.tier,
        "customer_since": customer.created_at.date().isoformat(),
        "address": customer.address,
        "order_count": customer.orders.count(),
        "recent_orders": [
            {
                "order_id": o.number,
                "status": o.status,
                "placed_at": o.placed_at.isoformat(),
                "total": money(o.total),
            }
            for o in orders
        ],
        "open_tickets": Ticket.objects.filter(
            fields__contains={"customer_id": customer.code}, status=Ticket.Status.OPEN
        ).count(),
    }


@tool(risk="low", read_only=True)
def get_customer_notes(customer_id: str) -> dict[str, Any]:
    """Read the support team's notes about a customer, oldest first.

    Args:
        customer_id: The customer id, e.g. "C001".
    """
    customer = find_customer(customer_id)
    return {
        "customer_id": customer.code,
        "notes": [
            {"created_at": n.created_at.isoformat(), "author": n.author, "note": n.body}
            for n in customer.notes.all()
        ],
    }


#: Stands for the SKU while the query is compiled (``_item_query``).
_ANY_SKU = "\x00sku\x00"


@functools.cache
def _item_query() -> tuple[str, tuple[Any, ...], list[str]]:
    """The product by its SKU (unique), as the ORM compiles it, once; its parameters with
    ``_ANY_SKU`` where the SKU goes, and the columns it returns."""
    sql, params = InventoryItem.objects.filter(sku=_ANY_SKU).query.sql_with_params()
    return sql, tuple(params), [f.attname for f in InventoryItem._meta.concrete_fields]


@tool(risk="low", read_only=True)
def check_inventory(sku: str) -> dict[str, Any]:
    """Check stock of a product: units on hand, available, and the next restock date.

    Args:
        sku: The product SKU, e.g. "KIT-0101".
    """
    code = normalise_code(sku)
    sql, template, names = _item_query()
    with connection.cursor() as cursor:
        cursor.execute(sql, _filled(template, _ANY_SKU, code))
        row = cursor.fetchone()
    item = None if row is None else InventoryItem.from_db(connection.alias, names, row)
    if item is None:
        words = [w for w in re.findall(r"[a-z]{3,}", str(sku).lower())]
        similar = (
            list(
                InventoryItem.objects.filter(name__icontains=words[0]).values_list("sku", "name")[
                    :3
                ]
            )
            if words
            else []
        )
        hint = (
            " Did you mean " + ", ".join(f"{s} ({n})" for s, n in similar) + "?"
            if similar
            else " SKUs look like 'KIT-0101'; get_order lists the SKUs of an order."
        )
        raise ShopRuleError(f"No product with SKU {sku!r}.{hint}")
    return {
        "sku": item.sku,
        "name": item.name,
        "price": money(item.price),
        "on_hand": item.on_hand,
        "reserved": item.reserved,
        "available": item.available,
        "in_stock": item.available > 0,
        "restock_date": _date(item.restock_date),
    }


def _search_terms(query: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9]+", query)[:12]


#: Stands for the search words while the query is compiled (``_kb_query``).
_WORDS = "\x00words\x00"


@functools.cache
def _kb_query() -> tuple[str, tuple[Any, ...]]:
    """The search's SQL, compiled by the ORM once (building it cost a call more time than
    PostgreSQL took to answer), its parameters with ``_WORDS`` where the words go. The
    best ``KB_RESULTS`` articles are picked by rank first; only those get an excerpt
    (``ts_headline`` is the costly part of the answer)."""
    search = SearchQuery(_WORDS, search_type="websearch", config="english")
    best = (
        KBArticle.objects.filter(document=search)
        .annotate(rank=SearchRank(F("document"), search))
        .order_by(F("rank").desc(), "slug")
        .values("pk")[:KB_RESULTS]
    )
    rows = (
        KBArticle.objects.filter(pk__in=best)
        .annotate(rank=SearchRank(F("document"), search))
        .annotate(
            excerpt=SearchHeadline(
                "body",
                search,
                config="english",
                max_words=40,
                min_words=15,
                start_sel="",
                stop_sel="",
            )
        )
        .order_by(F("rank").desc(), "slug")
        .values_list("slug", "title", "category", "rank", "excerpt", "body")
    )
    sql, params = rows.query.sql_with_params()
    return sql, tuple(params)


@tool(risk="low", read_only=True)
def search_kb(query: str) -> dict[str, Any]:
    """Search the knowledge base (policies, how-tos) and return the best matching articles.

    Args:
        query: A few keywords, e.g. "return policy damaged item".
    """
    terms = _search_terms(query)
    if not terms:
        raise ShopRuleError("The search query has no words to search for.")
    # Any term may match; ranking puts articles matching more (and in the title) first.
    words = " or ".join(terms)
    sql, template = _kb_query()
    with connection.cursor() as cursor:
        cursor.execute(sql, _filled(template, _WORDS, words))
        found = cursor.fetchall()
    rows = [
        SimpleNamespace(
            slug=slug, title=title, category=category, rank=rank, excerpt=excerpt, body=body
        )
        for slug, title, category, rank, excerpt, body in found
    ]
    return {
        "query": query,
        "results": [
            {
                "slug": a.slug,
                "title": a.title,
                "category": a.category,
                "rank": round(float(a.rank), 4),
                "excerpt": a.excerpt,
                "body": a.body[:KB_BODY_CHARS],
            }
            for a in rows
        ],
    }
