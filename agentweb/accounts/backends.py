"""Password sign-in, which ``AGENTWEB_LOCAL_LOGIN=0`` keeps for superusers only.

With company sign-in in charge of who works here, a password left on an old account must
not be a way around it; a superuser keeps one, for ``/admin/`` when the identity provider
is down or misconfigured.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend


class LocalBackend(ModelBackend):
    def user_can_authenticate(self, user: Any) -> bool:
        if not super().user_can_authenticate(user):
            return False
        return bool(settings.AGENTWEB_LOCAL_LOGIN or getattr(user, "is_superuser", False))
