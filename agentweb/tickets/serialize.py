"""A ticket as the API shows it (DESIGN §4 keys and §11's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Prefetch, QuerySet

from agentweb.outbox.models import Delivery
from agentweb.runs.models import Run
from agentweb.tickets import replies
from agentweb.tickets.models import Message, Ticket


def with_thread(qs: QuerySet[Ticket]) -> QuerySet[Ticket]:
    """Tickets with their messages read in one more query."""
    return qs.prefetch_related(Prefetch("messages", queryset=Message.objects.order_by("at", "pk")))


def active_runs(tickets: Sequence[Ticket]) -> dict[int, int]:
    """ticket id -> its queued, running or waiting top-level run (one query; dry runs
    are not the ticket's run)."""
    rows = (
        Run.objects.filter(
            ticket__in=[t.pk for t in tickets], status__in=Run.ACTIVE, parent__isnull=True
        )
        .exclude(mode=Run.Mode.DRY)
        .order_by("ticket_id", "-created_at")
        .values_list("ticket_id", "pk")
    )
    found: dict[int, int] = {}
    for ticket_id, run_id in rows:
        found.setdefault(ticket_id, run_id)
    return found


def message_json(message: Message, found: dict[str, Delivery]) -> dict[str, Any]:
    """A message; a reply agentweb delivers also has ``delivery``."""
    out = message.as_json()
    delivery = replies.delivery_json(message, found)
    if delivery is not None:
        out["delivery"] = delivery
    return out


def ticket_json(
    ticket: Ticket, active_run: int | None, found: dict[str, Delivery] | None = None
) -> dict[str, Any]:
    thread = ticket.thread()
    if found is None:
        found = replies.deliveries_of(thread)
    return {
        "id": ticket.pk,
        "source": ticket.source,
        "external_id": ticket.external_id or None,
        "subject": ticket.subject,
        "body": ticket.first_body(),
        "customer": ticket.customer_id or ticket.requester_email,
        "customer_name": ticket.requester_name,
        "requester": {"email": ticket.requester_email, "name": ticket.requester_name},
        "status": ticket.status,
        "queue": ticket.queue,
        "tags": list(ticket.tags),
        "fields": ticket.fields or {},
        "messages": [message_json(m, found) for m in thread],
        "created_at": ticket.created_at.isoformat(),
        "updated_at": ticket.updated_at.isoformat(),
        "active_run": active_run,
    }


def tickets_json(tickets: Sequence[Ticket]) -> list[dict[str, Any]]:
    active = active_runs(tickets)
    found = replies.deliveries_of(m for t in tickets for m in t.thread())
    return [ticket_json(t, active.get(t.pk), found) for t in tickets]
