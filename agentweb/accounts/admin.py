from typing import Any

from django.contrib import admin

from agentweb.accounts.models import ApiToken, OidcIdentity


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "name", "prefix", "created_at", "last_used_at")
    readonly_fields = ("prefix", "token_hash", "created_at", "last_used_at")


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin):
    """Which company identity signs in as which account (delete one to unlink it)."""

    list_display = ("user", "subject", "issuer", "created_at", "last_login_at")
    search_fields = ("user__username", "subject")
    readonly_fields = ("user", "issuer", "subject", "created_at", "last_login_at")

    def has_add_permission(self, request: Any) -> bool:
        return False
