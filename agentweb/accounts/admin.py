from django.contrib import admin

from agentweb.accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "name", "prefix", "created_at", "last_used_at")
    readonly_fields = ("prefix", "token_hash", "created_at", "last_used_at")
