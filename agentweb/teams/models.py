"""Teams: who works which ticket queues, and what they may spend a day (DESIGN §15)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

MAX_QUEUE = 100  # as tickets.Ticket.queue


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    queues = ArrayField(
        models.CharField(max_length=MAX_QUEUE),
        default=list,
        blank=True,
        help_text="The ticket queues this team owns (a queue may belong to several teams).",
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="teams", blank=True)
    daily_cost_usd = models.DecimalField(
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        help_text="What the team's runs may cost per day (US dollars, the installation's "
        "TIME_ZONE day); empty: no limit.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [("view_all_teams", "Can see every team's tickets, runs and approvals")]

    def __str__(self) -> str:
        return self.name
