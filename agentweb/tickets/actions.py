"""Every write to tickets happens here (the API, webhooks, the mailbox, the tools).

Each function is one transaction; what browsers should hear of is sent after commit.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentweb.tickets.models import API_SOURCE, Message, Ticket

log = logging.getLogger(__name__)


def do_open_ticket(
    *,
    subject: str,
    requester_email: str = "",
    requester_name: str = "",
    source: str = API_SOURCE,
    fields: dict[str, Any] | None = None,
) -> Ticket:
    """A new ticket with no message yet (an outgoing conversation starts with one)."""
    now = timezone.now()
    return Ticket.objects.create(
        source=source,
        subject=subject,
        requester_email=requester_email,
        requester_name=requester_name,
        fields=dict(fields or {}),
        created_at=now,
        updated_at=now,
    )


def do_add_outgoing(
    ticket: Ticket, body: str, *, author: str, run_id: int | None = None, key: str | None = None
) -> Message:
    """An outgoing message on ``ticket`` (a reply to its requester). An open ticket
    becomes pending: the ball is in the customer's court. Call inside the transaction
    that records the write."""
    now = timezone.now()
    message = Message.objects.create(
        ticket=ticket,
        direction=Message.Direction.OUT,
        author=author[:320],
        body=body,
        at=now,
        key=key,
        run_id=run_id,
    )
    changes: dict[str, Any] = {"updated_at": now}
    if ticket.status == Ticket.Status.OPEN:
        changes["status"] = Ticket.Status.PENDING
    Ticket.objects.filter(pk=ticket.pk).update(**changes)
    for name, value in changes.items():
        setattr(ticket, name, value)
    transaction.on_commit(lambda: log.info("reply %s written on ticket %s", message.pk, ticket.pk))
    return message
