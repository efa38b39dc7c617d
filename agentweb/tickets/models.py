"""Tickets and their thread of messages (DESIGN §11).

``(source, external_id)`` is unique in the database, so simultaneous deliveries of one
ticket make one row; ``queue`` is a plain indexed field (teams will own queues).
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.utils import timezone

from agentweb.teams.scope import scope_for

#: Sources that are not webhook sources (a webhook source may not take these names).
API_SOURCE = "api"
EMAIL_SOURCE = "email"
DEMO_SOURCE = "demo"
RESERVED_SOURCES = (API_SOURCE, EMAIL_SOURCE, DEMO_SOURCE)

MAX_SUBJECT = 500
MAX_TAG = 100
MAX_QUEUE = 100


class TicketQuerySet(models.QuerySet["Ticket"]):
    def visible_to(self, user: Any) -> TicketQuerySet:
        """The tickets ``user`` may see: every one before teams exist, then their teams'
        queues' (admins: all). Every page, API call, socket and count goes through it."""
        return self.filter(scope_for(user).tickets())


class Ticket(models.Model):
    class Status(models.TextChoices):
        OPEN = "open", "Open"
        PENDING = "pending", "Pending"
        SOLVED = "solved", "Solved"
        CLOSED = "closed", "Closed"

    source = models.CharField(max_length=64, default=API_SOURCE)
    external_id = models.CharField(max_length=500, blank=True)  # "": none
    subject = models.CharField(max_length=MAX_SUBJECT)
    requester_email = models.CharField(max_length=320, blank=True)
    requester_name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    queue = models.CharField(max_length=MAX_QUEUE, blank=True, db_index=True)
    tags = ArrayField(models.CharField(max_length=MAX_TAG), default=list, blank=True)
    fields = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TicketQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "external_id"],
                condition=~models.Q(external_id=""),
                name="tickets_source_external_id_unique",
            )
        ]
        indexes = [
            models.Index(fields=["status", "-updated_at"], name="tickets_status_updated"),
            models.Index(fields=["source", "-updated_at"], name="tickets_source_updated"),
            GinIndex(fields=["tags"], name="tickets_tags_gin"),
            # fields @> {"customer_id": ...}: a customer's tickets
            GinIndex(fields=["fields"], opclasses=["jsonb_path_ops"], name="tickets_fields_gin"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.subject}"

    @property
    def customer_id(self) -> str:
        """The customer id a source mapped into ``fields`` (the demo: ``C001``), or ""."""
        value = (self.fields or {}).get("customer_id")
        return str(value) if isinstance(value, str | int) else ""

    @property
    def requester_label(self) -> str:
        return self.requester_name or self.requester_email or "unknown requester"

    @property
    def customer_label(self) -> str:
        """Who wrote, as a prompt names them: ``Ann Lee (C001)``."""
        cid = self.customer_id
        return f"{self.requester_label} ({cid})" if cid else self.requester_label

    def thread(self) -> list[Message]:
        cached = getattr(self, "_prefetched_objects_cache", {}).get("messages")
        if cached is not None:
            return sorted(cached, key=lambda m: (m.at, m.pk))
        return list(self.messages.order_by("at", "pk"))

    def first_body(self) -> str:
        """The first incoming message's text (what §4's ``body`` is)."""
        return next((m.body for m in self.thread() if m.direction == Message.Direction.IN), "")

    def as_prompt(self) -> str:
        """The ticket in a system prompt (``{{ticket}}``): who, subject, first message."""
        return f"#{self.pk} from {self.customer_label}: {self.subject}\n{self.first_body()}"

    def as_task(self) -> str:
        """The text a run on this ticket starts with: the subject and the thread so far."""
        thread = self.thread()
        first = next((m for m in thread if m.direction == Message.Direction.IN), None)
        parts = [f"Handle ticket #{self.pk}: {self.subject}\n\n{first.body if first else ''}"]
        for m in thread:
            if m is first:
                continue
            who = "The customer wrote again" if m.direction == "in" else "We replied"
            parts.append(f"--- {who} ({m.at:%Y-%m-%d %H:%M} UTC):\n{m.body}")
        return "\n\n".join(p.rstrip() for p in parts)


class Message(models.Model):
    """One message of a ticket's thread. ``body`` is the new text; ``quoted`` keeps the
    history a mail quoted below it (kept, not shown as new text)."""

    class Direction(models.TextChoices):
        IN = "in", "Incoming"
        OUT = "out", "Outgoing"

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="messages")
    direction = models.CharField(max_length=3, choices=Direction.choices, default=Direction.IN)
    author = models.CharField(max_length=320, blank=True)
    body = models.TextField()
    quoted = models.TextField(blank=True)
    external_id = models.CharField(max_length=998, blank=True)  # "": none
    attachments = models.JSONField(default=list, blank=True)
    at = models.DateTimeField(default=timezone.now)
    #: The tool call that wrote an outgoing message (``<run>:<call id>``): written once.
    key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # A reply agentweb delivers: the outbox delivery's id, or why there is none.
    delivery_id = models.CharField(max_length=100, blank=True)
    undelivered = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["ticket", "external_id"],
                condition=~models.Q(external_id=""),
                name="tickets_message_external_id_unique",
            )
        ]
        indexes = [models.Index(fields=["ticket", "at"], name="tickets_message_thread")]

    def __str__(self) -> str:
        return f"{self.direction} on #{self.ticket_id} at {self.at:%Y-%m-%d %H:%M}"

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "direction": self.direction,
            "author": self.author,
            "body": self.body,
            "at": self.at.isoformat(),
            "external_id": self.external_id or None,
            "attachments": [
                {"name": str(a.get("name", "")), "size": int(a.get("size") or 0)}
                for a in (self.attachments or [])
                if isinstance(a, dict)
            ],
        }


class Source(models.Model):
    """A helpdesk (or any system) that sends tickets to ``/hooks/tickets/<name>`` signed
    with ``secret``, and takes replies at ``reply_url`` (signed the same way)."""

    class Kind(models.TextChoices):
        GENERIC = "generic", "Generic (agentweb's JSON, X-Agentweb-Signature)"
        ZENDESK = "zendesk", "Zendesk (its trigger payload and webhook signature)"

    name = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.GENERIC)
    secret = models.CharField(max_length=200, help_text="Shown once when set; signs both ways")
    reply_url = models.URLField(max_length=500, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class WebhookDelivery(models.Model):
    """A delivery a source made, by its id: the same id again changes nothing (200).
    Written in the transaction that applies the delivery, so a refused one leaves none."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="deliveries")
    delivery_id = models.CharField(max_length=200)
    event = models.CharField(max_length=40)
    ticket = models.ForeignKey(
        Ticket, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-received_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["source", "delivery_id"], name="tickets_delivery_id_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source_id}:{self.delivery_id}"


class Mailbox(models.Model):
    """How far the import of one IMAP folder got (``key``: user@host:port/folder), and
    whether the last poll reached it. ``lease_until``: a poll holds the mailbox until
    then (one poll at a time, across workers)."""

    key = models.CharField(max_length=500, unique=True)
    uidvalidity = models.BigIntegerField(null=True, blank=True)
    last_uid = models.BigIntegerField(default=0)
    next_poll_at = models.DateTimeField(default=timezone.now)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    imported = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return self.key


class ImportedMail(models.Model):
    """One mail taken from a mailbox: by its UID (under the folder's UIDVALIDITY) and by
    its Message-ID, each unique, so it is never imported twice. ``skipped`` says why a
    mail became no message (an auto-reply, one of our own)."""

    mailbox = models.ForeignKey(Mailbox, on_delete=models.CASCADE, related_name="mails")
    uidvalidity = models.BigIntegerField()
    uid = models.BigIntegerField()
    message_id = models.CharField(max_length=998)
    became = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )  # the ticket message it became
    skipped = models.CharField(max_length=100, blank=True)
    imported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["mailbox", "uidvalidity", "uid"], name="tickets_mail_uid_unique"
            ),
            models.UniqueConstraint(
                fields=["mailbox", "message_id"], name="tickets_mail_message_id_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.uidvalidity}:{self.uid} {self.message_id}"


class IntakeRule(models.Model):
    """A rule that starts runs (``auto``) or offers a start button (``suggest``) for tickets
    of a queue and/or with a tag; rules of ``AGENTWEB_INTAKE_RULES`` come first."""

    class Mode(models.TextChoices):
        AUTO = "auto", "Start a run when a ticket arrives or the customer writes again"
        SUGGEST = "suggest", "Offer a start button on the ticket"

    queue = models.CharField(max_length=MAX_QUEUE, blank=True, help_text="Empty: any queue")
    tag = models.CharField(max_length=MAX_TAG, blank=True, help_text="Empty: any tags")
    agent = models.CharField(max_length=100, help_text="The agent profile's name")
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.SUGGEST)
    enabled = models.BooleanField(default=True)
    position = models.PositiveIntegerField(default=0, help_text="Lower first")

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        where = [f"queue={self.queue}"] if self.queue else []
        where += [f"tag={self.tag}"] if self.tag else []
        return f"{self.mode} {self.agent} ({' '.join(where) or 'every ticket'})"
