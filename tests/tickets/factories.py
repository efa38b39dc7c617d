"""Tickets for tests: one incoming message, and the demo shop's customer and order named in
``fields`` as the seeded tickets name them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from agentweb.tickets.models import Message, Ticket


def make_ticket(
    subject: str = "Where is my parcel?",
    body: str = "It has not arrived.",
    *,
    customer: Any = None,
    order: Any = None,
    source: str = "demo",
    status: str = "open",
    at: datetime | None = None,
    **extra: Any,
) -> Ticket:
    """A ticket from ``customer`` (a shop Customer) about ``order`` (a shop Order), or from
    ``requester_email``/``requester_name`` given in ``extra``."""
    when = at or timezone.now()
    fields = dict(extra.pop("fields", {}))
    if customer is not None:
        fields["customer_id"] = customer.code
        extra.setdefault("requester_email", customer.email)
        extra.setdefault("requester_name", customer.name)
    if order is not None:
        fields["order_id"] = order.number
    ticket = Ticket.objects.create(
        subject=subject,
        source=source,
        status=status,
        fields=fields,
        created_at=when,
        updated_at=when,
        **extra,
    )
    Message.objects.create(
        ticket=ticket,
        direction="in",
        author=ticket.requester_name or ticket.requester_email,
        body=body,
        at=when,
    )
    return ticket
