"""Demo shop models: customers, orders, shipments, inventory, refunds, KB and tickets.

Ids that customers and the agent see are the ``code`` / ``number`` fields ("C001",
"A1001", "1Z..."); primary keys stay internal integers.
"""

from __future__ import annotations

from django.db import models


class Customer(models.Model):
    code = models.CharField(max_length=16, unique=True)
    name = models.CharField(max_length=200)
    email = models.EmailField()
    phone = models.CharField(max_length=40, blank=True)
    tier = models.CharField(max_length=20, default="standard")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return f"{self.code} {self.name}"


class Ticket(models.Model):
    class Status(models.TextChoices):
        OPEN = "open", "Open"
        PENDING = "pending", "Pending"
        CLOSED = "closed", "Closed"

    subject = models.CharField(max_length=200)
    body = models.TextField()
    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="tickets")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "-created_at"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.subject}"
