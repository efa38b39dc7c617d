"""One row per outgoing message (a mail, a signed webhook POST, a Slack post), healthchecks'
``Notification`` in spirit: what was sent to whom, and how it went."""

from __future__ import annotations

from typing import TypedDict
from urllib.parse import urlsplit

from django.db import models


class NotificationJson(TypedDict):
    """A delivery as pages and the API list it (``"notifications"`` of an approval)."""

    channel: str
    to: str
    state: str
    error: str | None
    attempts: int
    topic: str
    delivery_id: str
    sent_at: str | None


class Delivery(models.Model):
    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"  # a POST signed with agentweb.signing (ours)
        SLACK = "slack"  # a POST of Slack JSON to an incoming webhook or a response_url

    class State(models.TextChoices):
        QUEUED = "queued"  # not sent yet: waiting for its first attempt or a retry
        SENT = "sent"
        FAILED = "failed"  # given up: a permanent refusal, or retries ran out

    # Stable for life: the mail's Message-ID (<delivery_id@domain>) and the webhook's
    # "delivery_id", so a receiver that sees it twice (at-least-once) can drop the second.
    delivery_id = models.CharField(max_length=100, unique=True)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    target = models.CharField(max_length=2000)  # the recipient's address, or the URL
    to_label = models.CharField(max_length=300)  # what pages show as "to" (never a secret URL)
    # The exact bytes sent (UTF-8): the whole RFC 5322 message, or the JSON body. Fixed at
    # creation, so every attempt (also one after a crash) sends the same message.
    body = models.TextField()
    secret = models.CharField(max_length=200, blank=True)  # HMAC key of a signed POST
    topic = models.CharField(max_length=60, blank=True)  # "approval.requested", "reply" ...
    # What it belongs to, for "what reached whom" on that thing's page.
    about_type = models.CharField(max_length=40, blank=True)
    about_id = models.BigIntegerField(null=True, blank=True)
    # Rows with the same key go out in creation order: one waits while an earlier one of
    # its key is still queued (sent or failed lets it go).
    ordering_key = models.CharField(max_length=300, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    give_up_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)  # an attempt holds it
    dispatched_at = models.DateTimeField(null=True, blank=True)  # a wake-up was sent
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="outbox_delivery_due",
                condition=models.Q(state="queued"),
            ),
            models.Index(
                fields=["ordering_key", "id"],
                name="outbox_delivery_ordered",
                condition=models.Q(state="queued") & ~models.Q(ordering_key=""),
            ),
            models.Index(fields=["about_type", "about_id"], name="outbox_delivery_about"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} to {self.to_label} ({self.state})"

    @property
    def lane(self) -> str:
        """Deliveries that share a server share a lane: one that is down holds up only its
        own lane (``agentweb.outbox.lanes``)."""
        return lane_of(self.channel, self.target)

    def as_notification(self) -> NotificationJson:
        error = self.last_error or None
        return {
            "channel": self.channel,
            "to": self.to_label,
            "state": self.state,
            "error": error if self.state != self.State.SENT else None,
            "attempts": self.attempts,
            "topic": self.topic,
            "delivery_id": self.delivery_id,
            "sent_at": self.sent_at.isoformat() if self.sent_at else None,
        }


def lane_of(channel: str, target: str) -> str:
    if channel == Delivery.Channel.EMAIL:
        return "smtp"  # one SMTP server carries every mail
    parts = urlsplit(target)
    return f"{channel}:{parts.hostname}:{parts.port or ''}"
