"""Demo shop models: customers, orders, shipments, inventory, refunds and the KB.

Tickets are agentweb's own (``agentweb.tickets``); a demo ticket names its customer and
order in its ``fields`` (``customer_id``, ``order_id``).

The demo shop stands in for a company's real systems. Ids that customers and the agent
see are the ``code`` / ``number`` / ``tracking_number`` / ``sku`` fields ("C001",
"A1001", "1Z...", "KIT-0101"); primary keys stay internal integers.
"""

from __future__ import annotations

from decimal import Decimal

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Sum
from django.db.models.expressions import CombinedExpression

ZERO = Decimal("0.00")


class Customer(models.Model):
    code = models.CharField(max_length=16, unique=True)
    name = models.CharField(max_length=200)
    email = models.EmailField()
    phone = models.CharField(max_length=40, blank=True)
    tier = models.CharField(max_length=20, default="standard")
    address = models.TextField(blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return f"{self.code} {self.name}"


class Order(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending payment"
        PAID = "paid", "Paid"
        SHIPPED = "shipped", "Shipped"
        DELIVERED = "delivered", "Delivered"
        CANCELLED = "cancelled", "Cancelled"

    #: Statuses in which the order has not left the warehouse yet.
    BEFORE_SHIPPING = (Status.PENDING, Status.PAID)

    number = models.CharField(max_length=16, unique=True)
    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="orders")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PAID)
    currency = models.CharField(max_length=3, default="USD")
    subtotal = models.DecimalField(max_digits=10, decimal_places=2)
    shipping_cost = models.DecimalField(max_digits=10, decimal_places=2, default=ZERO)
    total = models.DecimalField(max_digits=10, decimal_places=2)
    #: What the payment provider actually captured (can exceed ``total`` on a duplicate charge).
    captured_amount = models.DecimalField(max_digits=10, decimal_places=2, default=ZERO)
    payment_method = models.CharField(max_length=40, default="card")
    shipping_address = models.TextField()
    placed_at = models.DateTimeField()
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-placed_at", "-id"]

    def __str__(self) -> str:
        return self.number

    def refunded_amount(self) -> Decimal:
        total = self.refunds.aggregate(s=Sum("amount"))["s"]
        return total if total is not None else ZERO

    def refundable_amount(self) -> Decimal:
        return max(self.captured_amount - self.refunded_amount(), ZERO)

    @property
    def before_shipping(self) -> bool:
        return self.status in self.BEFORE_SHIPPING


class OrderItem(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="items")
    sku = models.CharField(max_length=32)
    name = models.CharField(max_length=200)
    quantity = models.PositiveIntegerField(default=1)
    unit_price = models.DecimalField(max_digits=10, decimal_places=2)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku}"

    @property
    def line_total(self) -> Decimal:
        return self.unit_price * self.quantity


class Payment(models.Model):
    """One capture at the payment provider; a duplicate charge is two rows."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="payments")
    reference = models.CharField(max_length=40, unique=True)
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    method = models.CharField(max_length=40, default="card")
    captured_at = models.DateTimeField()

    class Meta:
        ordering = ["captured_at", "id"]

    def __str__(self) -> str:
        return self.reference


class Shipment(models.Model):
    class Status(models.TextChoices):
        LABEL_CREATED = "label_created", "Label created"
        IN_TRANSIT = "in_transit", "In transit"
        OUT_FOR_DELIVERY = "out_for_delivery", "Out for delivery"
        DELIVERED = "delivered", "Delivered"
        EXCEPTION = "exception", "Delivery exception"
        RETURNED = "returned", "Returned to sender"

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="shipments")
    carrier = models.CharField(max_length=20)
    tracking_number = models.CharField(max_length=40, unique=True)
    status = models.CharField(max_length=20, choices=Status.choices)
    shipped_at = models.DateTimeField()
    estimated_delivery = models.DateField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["shipped_at", "id"]

    def __str__(self) -> str:
        return f"{self.carrier} {self.tracking_number}"


class ShipmentEvent(models.Model):
    shipment = models.ForeignKey(Shipment, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    status = models.CharField(max_length=20, choices=Shipment.Status.choices)
    location = models.CharField(max_length=120)
    description = models.CharField(max_length=200)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.description}"


class CarrierEscalation(models.Model):
    """A trace/claim opened with the carrier (reversible: it can be withdrawn)."""

    shipment = models.ForeignKey(Shipment, on_delete=models.CASCADE, related_name="escalations")
    reference = models.CharField(max_length=24, unique=True)
    reason = models.TextField()
    status = models.CharField(max_length=12, default="open")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.reference


class InventoryItem(models.Model):
    sku = models.CharField(max_length=32, unique=True)
    name = models.CharField(max_length=200)
    price = models.DecimalField(max_digits=10, decimal_places=2)
    on_hand = models.IntegerField(default=0)
    reserved = models.IntegerField(default=0)
    restock_date = models.DateField(null=True, blank=True)

    class Meta:
        ordering = ["sku"]

    def __str__(self) -> str:
        return self.sku

    @property
    def available(self) -> int:
        return max(self.on_hand - self.reserved, 0)


class Refund(models.Model):
    """The refunds ledger. ``idempotency_key`` is the tool call id that created it."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refunds")
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    reason = models.TextField()
    idempotency_key = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="shop_refund_positive")
        ]

    def __str__(self) -> str:
        return f"R{self.pk} {self.amount} on {self.order_id}"


class AddressChange(models.Model):
    """History of shipping-address changes, so a change can be reviewed and undone."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="address_changes")
    old_address = models.TextField()
    new_address = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.order_id}: {self.new_address[:40]}"


class CustomerNote(models.Model):
    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="notes")
    body = models.TextField()
    author = models.CharField(max_length=60, default="support")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"note on {self.customer_id}"


class CustomerFact(models.Model):
    """Long-term memory about a customer that outlives a run (one value per key)."""

    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="facts")
    key = models.CharField(max_length=80)
    value = models.TextField()
    source_run = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["key"]
        constraints = [
            models.UniqueConstraint(fields=["customer", "key"], name="shop_fact_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


#: The weighted document of an article: stored in ``KBArticle.document`` as the article is
#: written, so a search does not run to_tsvector over every article's body again.
def kb_search_vector() -> CombinedExpression:
    return SearchVector("title", weight="A", config="english") + SearchVector(
        "body", weight="B", config="english"
    )


class KBArticle(models.Model):
    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    category = models.CharField(max_length=60)
    body = models.TextField()
    updated_at = models.DateTimeField()
    document = models.GeneratedField(
        expression=kb_search_vector(), output_field=SearchVectorField(), db_persist=True
    )

    class Meta:
        ordering = ["slug"]
        indexes = [GinIndex("document", name="shop_kb_fts_gin")]
        verbose_name = "knowledge base article"

    def __str__(self) -> str:
        return self.title


class WriteRecord(models.Model):
    """Idempotency record of a write tool: the same key twice returns the first result."""

    key = models.CharField(max_length=200, unique=True)
    tool = models.CharField(max_length=60)
    arguments = models.JSONField(default=dict)
    result = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.tool}:{self.key}"
