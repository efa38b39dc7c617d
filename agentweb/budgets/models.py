"""The spend ledger: what model calls cost per day, per profile and per team."""

from __future__ import annotations

from django.db import models


class DailySpend(models.Model):
    class Kind(models.TextChoices):
        PROFILE = "profile"
        TEAM = "team"

    day = models.DateField()  # in the installation's TIME_ZONE
    kind = models.CharField(max_length=10, choices=Kind.choices)
    ref = models.BigIntegerField()  # the profile's or the team's id
    cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=0)
    tokens = models.BigIntegerField(default=0)
    model_calls = models.IntegerField(default=0)
    #: calls whose model has no known price (their cost is not in cost_usd)
    unpriced_calls = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "kind", "ref"], name="daily_spend_unique")
        ]
        ordering = ["-day", "kind", "ref"]

    def __str__(self) -> str:
        return f"{self.day} {self.kind} {self.ref}: ${self.cost_usd}"
