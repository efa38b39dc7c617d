"""Roles, API tokens and the identities company sign-in links to accounts.

Roles are Django groups (operator, approver, admin) carrying the runs app's permissions,
so an installation can grant them through the admin like any other permission.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models

ROLE_OPERATOR = "operator"
ROLE_APPROVER = "approver"
ROLE_ADMIN = "admin"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token; only its hash is stored, the raw value is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=8)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} {self.prefix}…"

    @classmethod
    def issue(cls, user: models.Model, name: str = "") -> str:
        raw = "aw_" + secrets.token_urlsafe(32)
        cls.objects.create(user=user, name=name, prefix=raw[:8], token_hash=hash_token(raw))
        return raw


class OidcIdentity(models.Model):
    """The identity provider's account (issuer and subject, which never change) that signs
    in as this user; usernames and emails may change at the provider, this link does not."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique")
        ]
        verbose_name = "company sign-in identity"
        verbose_name_plural = "company sign-in identities"

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
