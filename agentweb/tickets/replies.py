"""Replies out (DESIGN §11): an outgoing message agentweb wrote goes to the customer through
its ticket's source, on the shared outbox (``agentweb.outbox``).

- ``email`` tickets: a mail through ``AGENTWEB_SMTP_URL`` to the requester, ``Subject: Re:
  <subject> [#<id>]``, ``In-Reply-To`` the customer's last mail, ``References`` the thread,
  ``Message-ID`` the delivery's id (stored as the message's ``external_id``, so the
  customer's answer threads onto the ticket).
- a webhook source with a reply URL: a POST of ``{"event": "message.created",
  "delivery_id", "ticket": {"id", "external_id"}, "message": {"id", "body"}}`` signed with
  the source's secret.
- anything else: stored, not delivered, and the message says why.

The delivery row is created in the transaction that writes the message (one delivery id
per message: ``reply-<message id>``), and sent after commit by a worker's lane: a run
never waits for it, a retry or a re-send after a killed worker sends the same bytes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from email.headerregistry import Address
from typing import Any

from django.conf import settings

from agentweb.outbox import actions as outbox
from agentweb.outbox.models import Delivery
from agentweb.tickets.models import EMAIL_SOURCE, Message, Source, Ticket

log = logging.getLogger(__name__)

ABOUT = "ticketmessage"
_TAG = re.compile(r"\s*\[#[0-9]{1,18}\]")
_MESSAGE_ID = re.compile(r"^<[^<>\s]+>$")


def delivery_id_for(message: Message) -> str:
    return f"reply-{message.pk}"


def reply_subject(ticket: Ticket) -> str:
    subject = _TAG.sub("", ticket.subject).strip() or "Your request"
    if not subject.lower().startswith("re:"):
        subject = f"Re: {subject}"
    return f"{subject} [#{ticket.pk}]"


def _thread_ids(ticket: Ticket, before: Message) -> tuple[str | None, list[str]]:
    """(In-Reply-To, References) for a reply: the customer's last mail, and the thread's
    Message-IDs in order (the first and the last 19)."""
    ids: list[str] = []
    last_in: str | None = None
    if _MESSAGE_ID.match(ticket.external_id or ""):
        ids.append(ticket.external_id)
    for m in ticket.messages.exclude(pk=before.pk).order_by("at", "pk"):
        if _MESSAGE_ID.match(m.external_id or ""):
            if m.external_id not in ids:
                ids.append(m.external_id)
            if m.direction == Message.Direction.IN:
                last_in = m.external_id
    if last_in is None and ids:
        last_in = ids[0]
    refs = ids if len(ids) <= 20 else [ids[0], *ids[-19:]]
    return last_in, refs


def queue_delivery(ticket: Ticket, message: Message) -> None:
    """Queue ``message`` for its ticket's channel, or note why it has none. Call inside
    the transaction that wrote it."""
    try:
        if ticket.source == EMAIL_SOURCE:
            fields = _by_email(ticket, message)
        else:
            fields = _by_webhook(ticket, message)
    except outbox.BadDelivery as exc:
        fields = {"undelivered": f"not delivered: {exc}"}
    Message.objects.filter(pk=message.pk).update(**fields)
    for name, value in fields.items():
        setattr(message, name, value)


def _by_email(ticket: Ticket, message: Message) -> dict[str, str]:
    if settings.AGENTWEB_SMTP is None:
        return {"undelivered": "not delivered: mail is off (AGENTWEB_SMTP_URL is not set)"}
    try:
        to = str(Address(display_name=ticket.requester_name, addr_spec=ticket.requester_email))
    except (ValueError, IndexError):
        to = ""
    if "@" not in to:
        shown = ticket.requester_email[:100] or "none"
        return {"undelivered": f"not delivered: the requester's address ({shown}) is not usable"}
    delivery_id = delivery_id_for(message)
    in_reply_to, references = _thread_ids(ticket, message)
    headers = {}
    if in_reply_to:
        headers["In-Reply-To"] = in_reply_to
    if references:
        headers["References"] = " ".join(references)
    outbox.do_queue_email(
        to=to,
        subject=reply_subject(ticket),
        text=message.body,
        headers=headers,
        delivery_id=delivery_id,
        to_label=ticket.requester_email,
        topic="reply",
        about=(ABOUT, message.pk),
        ordering_key=f"ticket-{ticket.pk}",
    )
    return {"delivery_id": delivery_id, "external_id": outbox.message_id(delivery_id)}


def _by_webhook(ticket: Ticket, message: Message) -> dict[str, str]:
    source = Source.objects.filter(name=ticket.source).first()
    if source is None or not source.enabled or not source.reply_url:
        why = (
            f"source {ticket.source!r} has no reply URL"
            if source is not None
            else f"tickets from {ticket.source!r} have no reply channel"
        )
        return {"undelivered": f"not delivered: {why}"}
    delivery_id = delivery_id_for(message)
    outbox.do_queue_webhook(
        url=source.reply_url,
        secret=source.secret,
        payload={
            "event": "message.created",
            "delivery_id": None,  # the outbox puts the delivery's id here
            "ticket": {"id": ticket.pk, "external_id": ticket.external_id or None},
            "message": {"id": message.pk, "body": message.body},
        },
        delivery_id=delivery_id,
        to_label=f"{source.name} reply URL",
        topic="reply",
        about=(ABOUT, message.pk),
        ordering_key=f"ticket-{ticket.pk}",
    )
    return {"delivery_id": delivery_id}


# --- what pages and the API show ---------------------------------------------------------------


def deliveries_of(messages: Iterable[Message]) -> dict[str, Delivery]:
    """delivery id -> its row, for the messages that have one (one query)."""
    ids = [m.delivery_id for m in messages if m.delivery_id]
    if not ids:
        return {}
    return {d.delivery_id: d for d in Delivery.objects.filter(delivery_id__in=ids)}


def delivery_json(message: Message, found: dict[str, Delivery]) -> dict[str, Any] | None:
    """``{"state", "reason", "attempts"}`` of a reply agentweb delivers; None for other
    messages (incoming ones, replies sent elsewhere and recorded)."""
    if message.direction != Message.Direction.OUT:
        return None
    if message.undelivered:
        return {"state": "failed", "reason": message.undelivered, "attempts": 0}
    delivery = found.get(message.delivery_id) if message.delivery_id else None
    if delivery is None:
        return None
    return {
        "state": delivery.state,
        "reason": "" if delivery.state == Delivery.State.SENT else delivery.last_error,
        "attempts": delivery.attempts,
        "to": delivery.to_label,
        "sent_at": delivery.sent_at.isoformat() if delivery.sent_at else None,
    }
