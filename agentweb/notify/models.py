"""What the approval channels keep: people's Slack ids, the links mailed to them, and
when an approval was escalated and reminded."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from agentweb.runs.models import Approval


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class SlackIdentity(models.Model):
    """A person's Slack user id, set by an admin (``AGENTWEB_SLACK_USERS`` is the other
    way): a click in Slack counts as that person's."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack"
    )
    slack_id = models.CharField(
        "Slack user id",
        max_length=21,
        unique=True,
        validators=[RegexValidator(r"^[UW][A-Z0-9]{2,20}$", "a Slack user id, like U0123ABCD")],
        help_text="Slack: profile → ⋮ → Copy member ID (U…)",
    )

    class Meta:
        verbose_name = "Slack identity"
        verbose_name_plural = "Slack identities"

    def __str__(self) -> str:
        return f"{self.slack_id} = {self.user}"


class ApprovalLink(models.Model):
    """A decision link mailed to one person for one approval: it works once, only for that
    person, only while the approval's arguments are the ones mailed, and only until the
    approval expires. Only the token's hash is kept."""

    class Purpose(models.TextChoices):
        REQUESTED = "requested"
        ESCALATED = "escalated"
        REMINDER = "reminder"

    approval = models.ForeignKey(Approval, on_delete=models.CASCADE, related_name="links")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    token_hash = models.CharField(max_length=64, unique=True)
    arguments_hash = models.CharField(max_length=64)
    purpose = models.CharField(max_length=12, choices=Purpose.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"link for {self.user} to approval {self.approval_id}"


class ApprovalNotice(models.Model):
    """The notification schedule of one approval: who was told first, when it escalates
    (once) and when the reminder goes (once), if it is still pending then."""

    approval = models.OneToOneField(Approval, on_delete=models.CASCADE, related_name="notice")
    announced_at = models.DateTimeField(null=True, blank=True)  # mails and Slack made
    notified = models.JSONField(default=list)  # user ids first mailed
    slack = models.BooleanField(default=False)  # the request went to Slack
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    remind_at = models.DateTimeField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["escalate_at"],
                name="notify_escalation_due",
                condition=models.Q(escalated_at__isnull=True, escalate_at__isnull=False),
            ),
            models.Index(
                fields=["remind_at"],
                name="notify_reminder_due",
                condition=models.Q(reminded_at__isnull=True, remind_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"notice of approval {self.approval_id}"
