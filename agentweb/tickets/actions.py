"""Every write to tickets happens here (the API, webhooks, the mailbox, the tools).

Each function is one transaction. ``(source, external_id)`` is unique in the database:
simultaneous deliveries of one ticket all meet at its row (the loser of the insert waits
for the winner's commit, then takes the row's lock), so they make one ticket and, when
they carry the same text, one message. Browsers hear of a change after commit.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentweb.outbox.models import Delivery
from agentweb.runs import publish
from agentweb.runs.errors import ActionError, Conflict, NotAllowed, NotFound
from agentweb.tickets import replies
from agentweb.tickets.models import API_SOURCE, RESERVED_SOURCES, Message, Source, Ticket

log = logging.getLogger(__name__)

TICKETS_GROUP = "tickets"
NO_SUBJECT = "(no subject)"
SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")

#: Called after commit with (ticket id, new incoming message id or None, created): the
#: intake rules listen here (``agentweb.tickets.intake``).
_arrival_hooks: list[Callable[[int, int | None, bool], None]] = []


def on_arrival(hook: Callable[[int, int | None, bool], None]) -> None:
    if hook not in _arrival_hooks:
        _arrival_hooks.append(hook)


@dataclass
class Incoming:
    """What a source says about a ticket and, optionally, a new message on it."""

    source: str
    subject: str
    external_id: str = ""
    body: str = ""
    requester_email: str = ""
    requester_name: str = ""
    status: str | None = None
    queue: str | None = None
    tags: Sequence[str] | None = None
    fields: dict[str, Any] | None = None
    author: str = ""
    message_external_id: str = ""
    quoted: str = ""
    attachments: list[dict[str, Any]] = field(default_factory=list)
    at: datetime | None = None


@dataclass
class Received:
    ticket: Ticket
    created: bool
    message: Message | None  # the new incoming message, if one was added


# --- who may ------------------------------------------------------------------------------


def may_add_tickets(user: Any) -> None:
    if user is not None and not user.has_perm("tickets.add_ticket"):
        raise NotAllowed("you may not create tickets (operators and admins may)")


def may_change_tickets(user: Any) -> None:
    if user is not None and not user.has_perm("tickets.change_ticket"):
        raise NotAllowed("you may not change tickets (operators and admins may)")


# --- tickets arriving ---------------------------------------------------------------------


def do_receive_ticket(incoming: Incoming, *, by: Any = None, update: bool = False) -> Received:
    """A ticket from a source: new, or (same ``source`` and ``external_id``) the existing
    one, which gains a message only when ``body`` differs from its last incoming message
    (or carries a message id it has not seen). ``update``: the source's status, queue,
    tags, fields and subject replace the stored ones (a helpdesk's ``ticket.updated``).
    ``by``: the person or token's user (None: a source of ours, already authenticated)."""
    may_add_tickets(by)
    now = timezone.now()
    with transaction.atomic():
        ticket, created = _ticket_for(incoming, now)
        if not created and update:
            _apply_update(ticket, incoming, now)
        message = None
        if incoming.body.strip():
            message = _add_incoming(ticket, incoming, first=created)
        if created or message is not None or update:
            _changed_on_commit(ticket.pk, message.pk if message else None, created)
    return Received(ticket, created, message)


def _ticket_for(incoming: Incoming, now: datetime) -> tuple[Ticket, bool]:
    def new() -> Ticket:
        return Ticket(
            source=incoming.source,
            external_id=incoming.external_id,
            subject=incoming.subject or NO_SUBJECT,
            requester_email=incoming.requester_email,
            requester_name=incoming.requester_name,
            status=incoming.status or Ticket.Status.OPEN,
            queue=incoming.queue or "",
            tags=list(incoming.tags or []),
            fields=dict(incoming.fields or {}),
            created_at=min(incoming.at or now, now),
            updated_at=now,
        )

    if not incoming.external_id:
        ticket = new()
        ticket.save()
        return ticket, True
    key = {"source": incoming.source, "external_id": incoming.external_id}
    found = Ticket.objects.select_for_update().filter(**key).first()
    if found is not None:
        return found, False
    try:
        with transaction.atomic():  # a savepoint: a lost race leaves the outer one usable
            ticket = new()
            ticket.save()
            return ticket, True
    except IntegrityError:
        # Another delivery inserted it first; its commit made it visible to this statement.
        return Ticket.objects.select_for_update().get(**key), False


def _apply_update(ticket: Ticket, incoming: Incoming, now: datetime) -> None:
    changes: dict[str, Any] = {"updated_at": now}
    if incoming.subject and incoming.subject != ticket.subject:
        changes["subject"] = incoming.subject
    if incoming.status is not None:
        changes["status"] = incoming.status
    if incoming.queue is not None:
        changes["queue"] = incoming.queue
    if incoming.tags is not None:
        changes["tags"] = list(incoming.tags)
    if incoming.fields is not None:
        changes["fields"] = {**(ticket.fields or {}), **incoming.fields}
    if incoming.requester_email and not ticket.requester_email:
        changes["requester_email"] = incoming.requester_email
    if incoming.requester_name and not ticket.requester_name:
        changes["requester_name"] = incoming.requester_name
    Ticket.objects.filter(pk=ticket.pk).update(**changes)
    for name, value in changes.items():
        setattr(ticket, name, value)


def _add_incoming(ticket: Ticket, incoming: Incoming, first: bool) -> Message | None:
    """The new incoming message, or None when the ticket already has it (its id, or the
    same text as its last incoming message). The caller holds the ticket's row lock."""
    now = timezone.now()
    if not first:
        if incoming.message_external_id:
            if ticket.messages.filter(external_id=incoming.message_external_id).exists():
                return None
        else:
            last = (
                ticket.messages.filter(direction=Message.Direction.IN)
                .order_by("-at", "-pk")
                .values_list("body", flat=True)
                .first()
            )
            if last is not None and last.strip() == incoming.body.strip():
                return None
    message = Message.objects.create(
        ticket=ticket,
        direction=Message.Direction.IN,
        author=(incoming.author or incoming.requester_name or incoming.requester_email)[:320],
        body=incoming.body,
        quoted=incoming.quoted,
        external_id=incoming.message_external_id,
        attachments=list(incoming.attachments),
        at=min(incoming.at or now, now),
    )
    if not first:
        changes: dict[str, Any] = {"updated_at": now}
        if ticket.status in (Ticket.Status.PENDING, Ticket.Status.SOLVED):
            changes["status"] = Ticket.Status.OPEN  # the customer wrote again
        Ticket.objects.filter(pk=ticket.pk).update(**changes)
        for name, value in changes.items():
            setattr(ticket, name, value)
    return message


def _changed_on_commit(ticket_id: int, message_id: int | None, created: bool) -> None:
    publish.send_on_commit(
        TICKETS_GROUP, {"type": "ticket.changed", "ticket": ticket_id, "created": created}
    )
    for hook in _arrival_hooks:
        transaction.on_commit(
            lambda hook=hook: hook(ticket_id, message_id, created),  # type: ignore[misc]
            robust=True,
        )


def do_add_incoming(ticket_id: int, incoming: Incoming) -> Message | None:
    """A message the customer sent on a known ticket (a mail answering it); None when the
    ticket has it already."""
    with transaction.atomic():
        ticket = Ticket.objects.select_for_update().filter(pk=ticket_id).first()
        if ticket is None:
            raise NotFound(f"no ticket {ticket_id}")
        message = _add_incoming(ticket, incoming, first=False)
        if message is not None:
            _changed_on_commit(ticket.pk, message.pk, False)
    return message


# --- tickets changed by people ------------------------------------------------------------


def get_ticket(ticket_id: int, user: Any = None) -> Ticket:
    """The ticket, as ``user`` may see it (``Ticket.objects.visible_to``: another team's
    ticket is not found); ``user`` None: a source of ours, any ticket."""
    tickets = Ticket.objects.all() if user is None else Ticket.objects.visible_to(user)
    ticket = tickets.filter(pk=ticket_id).first()
    if ticket is None:
        raise NotFound(f"no ticket {ticket_id}")
    return ticket


def do_change_ticket(
    ticket_id: int,
    *,
    by: Any,
    status: str | None = None,
    queue: str | None = None,
    tags: Sequence[str] | None = None,
    fields: dict[str, Any] | None = None,
) -> Ticket:
    """Change a ticket's status, queue, tags or fields (merged key by key; None removes)."""
    may_change_tickets(by)
    with transaction.atomic():
        ticket = Ticket.objects.select_for_update().filter(pk=ticket_id).first()
        if ticket is None:
            raise NotFound(f"no ticket {ticket_id}")
        changes: dict[str, Any] = {"updated_at": timezone.now()}
        if status is not None:
            changes["status"] = status
        if queue is not None:
            changes["queue"] = queue
        if tags is not None:
            changes["tags"] = list(tags)
        if fields is not None:
            merged = {**(ticket.fields or {}), **fields}
            changes["fields"] = {k: v for k, v in merged.items() if v is not None}
        Ticket.objects.filter(pk=ticket.pk).update(**changes)
        for name, value in changes.items():
            setattr(ticket, name, value)
        _changed_on_commit(ticket.pk, None, False)
    return ticket


def do_add_message(
    ticket_id: int, body: str, *, by: Any, direction: str = "in", author: str = ""
) -> tuple[Message, bool]:
    """A message on the thread, and whether it is new: the customer wrote (``in``; the
    same text as the last incoming message is that message again), or a reply sent outside
    agentweb is recorded (``out``; agentweb delivers only its own replies)."""
    may_change_tickets(by)
    with transaction.atomic():
        ticket = Ticket.objects.select_for_update().filter(pk=ticket_id).first()
        if ticket is None:
            raise NotFound(f"no ticket {ticket_id}")
        now = timezone.now()
        if direction == Message.Direction.IN:
            incoming = Incoming(source=ticket.source, subject=ticket.subject, body=body)
            incoming.author = author or ticket.requester_label
            message = _add_incoming(ticket, incoming, first=False)
            if message is None:
                return ticket.messages.filter(direction=Message.Direction.IN).latest("at"), False
            _changed_on_commit(ticket.pk, message.pk, False)
            return message, True
        who = author or (by.get_username() if by is not None else "")
        message = Message.objects.create(
            ticket=ticket, direction=Message.Direction.OUT, author=who[:320], body=body, at=now
        )
        Ticket.objects.filter(pk=ticket.pk).update(updated_at=now)
        _changed_on_commit(ticket.pk, None, False)
    return message, True


# --- replies ------------------------------------------------------------------------------


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
    ticket = Ticket.objects.create(
        source=source,
        subject=subject,
        requester_email=requester_email,
        requester_name=requester_name,
        fields=dict(fields or {}),
        created_at=now,
        updated_at=now,
    )
    publish.send_on_commit(
        TICKETS_GROUP, {"type": "ticket.changed", "ticket": ticket.pk, "created": True}
    )
    return ticket


def do_add_outgoing(
    ticket: Ticket, body: str, *, author: str, run_id: int | None = None, key: str | None = None
) -> Message:
    """An outgoing message on ``ticket`` (a reply to its requester), queued for delivery
    through the ticket's source (``replies``). An open ticket becomes pending: the ball is
    in the customer's court. Call inside the transaction that records the write."""
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
    replies.queue_delivery(ticket, message)
    _changed_on_commit(ticket.pk, None, False)
    return message


def publish_changed(ticket_id: int) -> None:
    """Pages showing the ticket hear of a change now (the caller has committed)."""
    publish.send_now(
        TICKETS_GROUP, {"type": "ticket.changed", "ticket": ticket_id, "created": False}
    )


def delivery_changed(delivery: Delivery) -> None:
    """The outbox's hook (after commit): a reply's delivery was queued or changed."""
    if delivery.about_id is None:
        return
    ticket_id = (
        Message.objects.filter(pk=delivery.about_id).values_list("ticket_id", flat=True).first()
    )
    if ticket_id is not None:
        publish_changed(ticket_id)


# --- sources ------------------------------------------------------------------------------


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def check_source(name: str, kind: str, reply_url: str) -> None:
    """Why a source cannot be stored as given (``ActionError``), or nothing."""
    if not SOURCE_NAME.fullmatch(name):
        raise ActionError(f"source name {name[:64]!r}: use 1-64 of a-z, 0-9, _ and -")
    if name in RESERVED_SOURCES:
        raise ActionError(f"{name!r} is a built-in source ({', '.join(RESERVED_SOURCES)})")
    if kind not in Source.Kind.values:
        raise ActionError(f"kind must be one of {', '.join(Source.Kind.values)}")
    if reply_url:
        parts = urlsplit(reply_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ActionError(f"reply URL {reply_url[:200]!r} is not an http(s) URL")


def do_add_source(
    name: str, *, kind: str, reply_url: str = "", secret: str | None = None
) -> tuple[Source, str]:
    """A new webhook source and its secret (shown to the caller once)."""
    check_source(name, kind, reply_url)
    if Source.objects.filter(name=name).exists():
        raise Conflict(f"a source named {name!r} exists")
    secret = secret or new_secret()
    source = Source.objects.create(name=name, kind=kind, reply_url=reply_url, secret=secret)
    return source, secret


def do_set_secret(name: str, secret: str | None = None) -> str:
    secret = secret or new_secret()
    if not Source.objects.filter(name=name).update(secret=secret):
        raise NotFound(f"no source named {name!r}")
    return secret
