"""Tickets, sources and deliveries in /admin/. A source's secret is shown once, when it is
made or rotated, never in a list or form afterwards."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from agentweb.runs.errors import ActionError
from agentweb.runs.models import AgentProfile
from agentweb.tickets import actions, models


class MessageInline(admin.TabularInline):
    model = models.Message
    extra = 0
    fields = ("direction", "author", "body", "at", "external_id")
    readonly_fields = ("direction", "author", "body", "at", "external_id")
    can_delete = False


@admin.register(models.Ticket)
class TicketAdmin(admin.ModelAdmin):
    list_display = ("id", "subject", "source", "requester_email", "status", "queue", "updated_at")
    list_filter = ("status", "source", "queue")
    search_fields = ("subject", "requester_email", "requester_name", "external_id")
    readonly_fields = ("source", "external_id", "created_at", "updated_at")
    inlines = (MessageInline,)


class SourceForm(forms.ModelForm):
    reply_url = forms.URLField(
        assume_scheme="https", required=False, help_text="Where replies are POSTed (signed)"
    )

    class Meta:
        model = models.Source
        fields = ("name", "kind", "reply_url", "enabled")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        name = data.get("name") if self.instance.pk is None else self.instance.name
        try:
            actions.check_source(name or "", data.get("kind") or "", data.get("reply_url") or "")
        except ActionError as exc:
            raise forms.ValidationError(exc.message) from None
        return data


@admin.register(models.Source)
class SourceAdmin(admin.ModelAdmin):
    form = SourceForm
    list_display = ("name", "kind", "reply_url", "enabled", "created_at")
    actions = ("rotate_secret",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.secret = actions.new_secret()
        super().save_model(request, obj, form, change)
        if not change:
            self._show_once(request, obj.name, obj.secret)

    @admin.action(description="Rotate the secret (shown once)")
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[models.Source]) -> None:
        for source in queryset:
            self._show_once(request, source.name, actions.do_set_secret(source.name))

    def _show_once(self, request: HttpRequest, name: str, secret: str) -> None:
        messages.warning(
            request,
            f"Secret of source {name} (shown once; the sender signs with it): {secret}",
        )


@admin.register(models.WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ("delivery_id", "source", "event", "ticket", "received_at")
    list_filter = ("source", "event")
    search_fields = ("delivery_id",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class IntakeRuleForm(forms.ModelForm):
    class Meta:
        model = models.IntakeRule
        fields = ("queue", "tag", "agent", "mode", "enabled", "position")

    def clean_agent(self) -> str:
        name = (self.cleaned_data.get("agent") or "").strip()
        if not AgentProfile.objects.filter(name=name).exists():
            known = ", ".join(AgentProfile.objects.values_list("name", flat=True)) or "none"
            raise forms.ValidationError(f"no agent profile {name!r}; known: {known}")
        return name


@admin.register(models.IntakeRule)
class IntakeRuleAdmin(admin.ModelAdmin):
    form = IntakeRuleForm
    list_display = ("position", "mode", "agent", "queue", "tag", "enabled")
    list_display_links = ("agent",)
    list_editable = ("position", "enabled")

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        configured = settings.AGENTWEB_INTAKE_RULES
        if configured:
            listed = "; ".join(str(rule.as_json()) for rule in configured)
            messages.info(request, f"AGENTWEB_INTAKE_RULES apply before these: {listed}")
        return super().changelist_view(request, extra_context)
