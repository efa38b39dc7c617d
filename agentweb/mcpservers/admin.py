"""MCP servers in /admin/: add, change (secrets are write-only), remove, contact again."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join

from agentweb.mcpservers import actions
from agentweb.mcpservers.models import McpServer


class ServerForm(forms.ModelForm):
    env_lines = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="stdio: NAME=VALUE, one a line. Stored, never shown again; leave empty "
        "to keep what is stored (write a single '-' to clear it).",
    )
    header_lines = forms.CharField(
        label="Headers",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="Streamable HTTP: 'Name: value', one a line. Stored, never shown again; "
        "leave empty to keep what is stored (a single '-' clears it).",
    )

    class Meta:
        model = McpServer
        fields = ("name", "command", "url")

    def _pairs(self, field: str) -> dict[str, str] | None:
        text = self.cleaned_data.get(field, "") or ""
        if not text.strip():
            return None if self.instance.pk else {}
        if text.strip() == "-":
            return {}
        lines = [line for line in text.splitlines() if line.strip()]
        if field == "env_lines":
            return actions.parse_env(lines)
        return actions.parse_headers(lines)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            env, headers = self._pairs("env_lines"), self._pairs("header_lines")
        except actions.ServerInvalid as exc:
            raise forms.ValidationError(exc.message) from None
        command, url = data.get("command") or "", data.get("url") or ""
        # What is stored stays only where it still fits (a server now reached by URL
        # keeps no environment), as do_change_server keeps it.
        kept_env = {} if url.strip() else dict(self.instance.env or {})
        kept_headers = {} if command.strip() else dict(self.instance.headers or {})
        name = self.instance.name if self.instance.pk else data.get("name", "")
        errors = actions.check_server(
            name,
            command,
            url,
            kept_env if env is None else env,
            kept_headers if headers is None else headers,
        )
        for field, message in errors.items():
            target = {"env": "env_lines", "headers": "header_lines"}.get(field, field)
            self.add_error(target if target in self.fields else None, message)
        self.pairs = (env, headers)
        return data


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    form = ServerForm
    list_display = ("name", "transport", "target", "state", "tool_count", "checked_at")
    list_filter = ("transport", "state")
    search_fields = ("name", "command", "url")
    readonly_fields = ("transport", "secrets", "state", "error", "tool_list", "checked_at")
    actions = ("contact_again",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_readonly_fields(request, obj)
        return (*fields, "name") if obj is not None else fields

    @admin.display(description="command or URL")
    def target(self, obj: McpServer) -> str:
        return obj.command or obj.as_json().get("url", "")

    @admin.display(description="tools")
    def tool_count(self, obj: McpServer) -> int:
        return len(obj.tools or [])

    @admin.display(description="stored secrets (names only)")
    def secrets(self, obj: McpServer) -> str:
        names = [*(f"env {k}" for k in sorted(obj.env or {}))]
        names += [f"header {k}" for k in sorted(obj.headers or {})]
        return ", ".join(names) or "none"

    @admin.display(description="tools")
    def tool_list(self, obj: McpServer) -> Any:
        found = obj.as_json()["tools"]
        if not found:
            return "none listed yet"
        return format_html_join(", ", "<code>{}</code>", ((name,) for name in found))

    def save_model(self, request: HttpRequest, obj: McpServer, form: Any, change: bool) -> None:
        env, headers = form.pairs
        data = form.cleaned_data
        if change:
            saved = actions.do_change_server(
                McpServer.objects.get(pk=obj.pk),
                command=data.get("command", ""),
                url=data.get("url", ""),
                env=env,
                headers=headers,
                actor=request.user,
            )
        else:
            saved = actions.do_add_server(
                name=data["name"],
                command=data.get("command", ""),
                url=data.get("url", ""),
                env=env,
                headers=headers,
                actor=request.user,
            )
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: McpServer) -> None:
        actions.do_remove_server(obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            actions.do_remove_server(server, actor=request.user)

    @admin.action(description="Ask a worker to contact the selected servers again")
    def contact_again(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            actions.ask_for_contact(server.name)
        self.message_user(request, "Asked; the state shows what it found.", messages.INFO)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return actions.may_manage(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return actions.may_manage(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return actions.may_manage(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return actions.may_manage(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return actions.may_manage(request.user)
