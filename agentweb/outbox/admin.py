from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from agentweb.outbox.models import Delivery


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    """Deliveries are written by the outbox only; the admin shows what reached whom."""

    list_display = (
        "delivery_id",
        "channel",
        "to_label",
        "topic",
        "state",
        "attempts",
        "created_at",
    )
    list_filter = ("channel", "state", "topic")
    search_fields = ("delivery_id", "to_label", "about_type")
    exclude = ("secret", "target")  # a Slack webhook URL is its secret
    readonly_fields = (
        "delivery_id", "channel", "to_label", "topic", "about_type", "about_id", "ordering_key",
        "state", "attempts", "next_attempt_at", "give_up_at", "last_error", "created_at",
        "sent_at", "body",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
