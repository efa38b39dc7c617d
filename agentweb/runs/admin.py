from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from agentweb.runs.models import AgentProfile, Approval, AuditEntry, Run, RunEvent, ToolExecution


@admin.register(AgentProfile)
class AgentProfileAdmin(admin.ModelAdmin):
    list_display = ("name", "model", "max_iterations", "updated_at")
    search_fields = ("name", "description")


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records are written by the actions only; the admin shows them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "status", "agent", "created_by", "created_at", "finished_at")
    list_filter = ("status", "agent")
    search_fields = ("task", "final_answer")
    exclude = ("state",)


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "type", "at")
    list_filter = ("type",)


@admin.register(ToolExecution)
class ToolExecutionAdmin(ReadOnlyAdmin):
    list_display = ("run", "call_id", "tool", "status", "started_at", "duration_ms")
    list_filter = ("status", "tool")


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "tool", "risk", "status", "decided_by", "requested_at")
    list_filter = ("status", "tool", "risk")


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("at", "action", "actor", "run")
    list_filter = ("action",)
