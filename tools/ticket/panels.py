"""What the ticket pages show beside a demo ticket: the shop's customer, order and memory,
found through the ticket's ``fields`` (``customer_id``, ``order_id``). Plain text only:
the page escapes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Count, Prefetch

from agentweb.shop.models import Customer, CustomerFact, Order


def _field(ticket: Any, name: str) -> str:
    value = (getattr(ticket, "fields", None) or {}).get(name)
    return value.strip().upper() if isinstance(value, str) else ""


def ticket_context(tickets: Sequence[Any]) -> dict[int, list[dict[str, Any]]]:
    """ticket id -> sections ``{"label", "lines": [str], "items": [(key, value)]}``, in
    a fixed number of queries for any number of tickets."""
    codes = {_field(t, "customer_id") for t in tickets} - {""}
    numbers = {_field(t, "order_id") for t in tickets} - {""}
    customers = {
        c.code: c
        for c in Customer.objects.filter(code__in=codes)
        .annotate(n_orders=Count("orders"))
        .prefetch_related(Prefetch("facts", queryset=CustomerFact.objects.order_by("key")))
    }
    orders = {
        o.number: o
        for o in Order.objects.filter(number__in=numbers).prefetch_related("items", "shipments")
    }
    out: dict[int, list[dict[str, Any]]] = {}
    for ticket in tickets:
        sections: list[dict[str, Any]] = []
        customer = customers.get(_field(ticket, "customer_id"))
        if customer is not None:
            orders_note = f" · {customer.n_orders} order{'s' if customer.n_orders != 1 else ''}"
            sections.append(
                {
                    "label": "Customer",
                    "lines": [
                        f"{customer.name} · {customer.code} · {customer.tier}",
                        f"{customer.email}{orders_note if customer.n_orders else ''}",
                    ],
                }
            )
        order = orders.get(_field(ticket, "order_id"))
        if order is not None:
            lines = [
                f"{order.number} · {order.get_status_display()} · {order.total} {order.currency}",
                ", ".join(item.name for item in order.items.all()),
            ]
            lines += [
                f"{s.carrier} {s.tracking_number} · {s.get_status_display()}"
                for s in order.shipments.all()
            ]
            sections.append({"label": "Order", "lines": [line for line in lines if line]})
        if customer is not None:
            facts = [(f.key, f.value[:140]) for f in customer.facts.all()]
            if facts:
                sections.append({"label": "Memory", "lines": [], "items": facts})
        out[ticket.pk] = sections
    return out
