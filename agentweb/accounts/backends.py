"""Password sign-in, which ``AGENTWEB_LOCAL_LOGIN=0`` keeps for superusers only.

With company sign-in in charge of who works here, a password left on an old account must
not be a way around it; a superuser keeps one, for ``/admin/`` when the identity provider
is down or misconfigured.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.db import connection


class LocalBackend(ModelBackend):
    def user_can_authenticate(self, user: Any) -> bool:
        if not super().user_can_authenticate(user):
            return False
        return bool(settings.AGENTWEB_LOCAL_LOGIN or getattr(user, "is_superuser", False))

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        """The person's permissions, their own and their groups', in one statement.

        ModelBackend reads them with two ORM queries per request, whose building (the
        group query's joins) cost an API request more CPU time than anything else it did;
        the result is the same set of ``app_label.codename``, cached on the user object
        for the request as ModelBackend caches it."""
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if user_obj.is_superuser:
            return super().get_all_permissions(user_obj, obj)
        if not hasattr(user_obj, "_perm_cache"):
            user_obj._perm_cache = _permissions_of(user_obj.pk)
        return user_obj._perm_cache


def _permissions_of(user_id: int) -> set[str]:
    """``app_label.codename`` of the user's own permissions and their groups' (the tables
    of Django's default user model, which this project uses)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ct.app_label, p.codename FROM auth_permission p "
            "JOIN django_content_type ct ON ct.id = p.content_type_id "
            "WHERE p.id IN (SELECT permission_id FROM auth_user_user_permissions "
            "WHERE user_id = %s UNION SELECT gp.permission_id FROM auth_group_permissions gp "
            "JOIN auth_user_groups ug ON ug.group_id = gp.group_id WHERE ug.user_id = %s)",
            [user_id, user_id],
        )
        return {f"{app_label}.{codename}" for app_label, codename in cursor.fetchall()}
