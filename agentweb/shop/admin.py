"""Admin for the demo shop, so staff can look behind what the assistant did."""

from __future__ import annotations

from django.contrib import admin

from . import models


class OrderItemInline(admin.TabularInline):
    model = models.OrderItem
    extra = 0


class PaymentInline(admin.TabularInline):
    model = models.Payment
    extra = 0


class RefundInline(admin.TabularInline):
    model = models.Refund
    extra = 0
    readonly_fields = ("amount", "reason", "idempotency_key", "created_at")


@admin.register(models.Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("number", "customer", "status", "total", "captured_amount", "placed_at")
    list_filter = ("status",)
    search_fields = ("number", "customer__code", "customer__name")
    inlines = (OrderItemInline, PaymentInline, RefundInline)


@admin.register(models.Customer)
class CustomerAdmin(admin.ModelAdmin):
    list_display = ("code", "name", "email", "tier")
    search_fields = ("code", "name", "email")
    list_filter = ("tier",)


class ShipmentEventInline(admin.TabularInline):
    model = models.ShipmentEvent
    extra = 0


@admin.register(models.Shipment)
class ShipmentAdmin(admin.ModelAdmin):
    list_display = ("tracking_number", "carrier", "order", "status", "estimated_delivery")
    list_filter = ("carrier", "status")
    search_fields = ("tracking_number", "order__number")
    inlines = (ShipmentEventInline,)


@admin.register(models.KBArticle)
class KBArticleAdmin(admin.ModelAdmin):
    list_display = ("slug", "title", "category", "updated_at")
    list_filter = ("category",)
    search_fields = ("title", "body")


@admin.register(models.InventoryItem)
class InventoryItemAdmin(admin.ModelAdmin):
    list_display = ("sku", "name", "price", "on_hand", "reserved", "restock_date")
    search_fields = ("sku", "name")


@admin.register(models.Refund)
class RefundAdmin(admin.ModelAdmin):
    list_display = ("order", "amount", "reason", "created_at")
    search_fields = ("order__number", "idempotency_key")


@admin.register(models.CustomerFact)
class CustomerFactAdmin(admin.ModelAdmin):
    list_display = ("customer", "key", "value", "source_run", "updated_at")
    search_fields = ("customer__code", "key", "value")


admin.site.register(
    [
        models.CustomerNote,
        models.CarrierEscalation,
        models.AddressChange,
        models.WriteRecord,
    ]
)
