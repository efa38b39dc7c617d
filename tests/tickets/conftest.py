from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client


@pytest.fixture
def people(transactional_db: None) -> dict[str, Any]:
    """Roles, one user per role and one without a role, committed (a live server sees them)."""
    from django.contrib.auth import get_user_model

    from agentweb.accounts.roles import ensure_roles
    from agentweb.runs.profiles import seed_profiles

    groups = ensure_roles()
    User = get_user_model()
    users = {}
    for name, role in [("operator", "operator"), ("approver", "approver"), ("admin", "admin")]:
        user = User.objects.create_user(name, password="pw-123456789")
        user.groups.add(groups[role])
        users[name] = User.objects.get(pk=user.pk)
    users["nobody"] = User.objects.create_user("nobody", password="pw-123456789")
    seed_profiles()
    return users


def bearer(user: Any) -> Client:
    from agentweb.accounts.models import ApiToken

    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def send(client: Client, method: str, url: str, data: Any) -> Any:
    body = data if isinstance(data, str | bytes) else json.dumps(data)
    return getattr(client, method)(url, data=body, content_type="application/json")
