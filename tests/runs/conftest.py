from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentweb.runs import agents
from agentweb.runtime.testing import ScriptedModel
from tests.runs import sample_tools


@pytest.fixture
def sample_registry(settings: Any) -> Iterator[None]:
    settings.AGENTWEB_TOOLS = ["tests.runs.sample_tools"]
    agents.registry.cache_clear()
    sample_tools.SIDE_EFFECTS.clear()
    sample_tools.KEYS.clear()
    sample_tools.NOTES.clear()
    yield
    agents.registry.cache_clear()


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch, sample_registry: None) -> ScriptedModel:
    model = ScriptedModel()
    monkeypatch.setattr(agents, "model_for", lambda spec: model)
    return model


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Capture the runs enqueued (``queue.send``'s messages) instead of sending them."""
    from agentweb.runs import queue

    sent: list[int] = []
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: sent.append(run_id))
    return sent


@pytest.fixture
def people(transactional_db: None) -> dict[str, Any]:
    """Roles, one user per role plus a second operator, and the default agent profiles."""
    from django.contrib.auth import get_user_model

    from agentweb.accounts.roles import ensure_roles
    from agentweb.runs.profiles import seed_profiles

    groups = ensure_roles()
    User = get_user_model()
    users = {}
    for name, role in [
        ("operator", "operator"),
        ("operator2", "operator"),
        ("approver", "approver"),
        ("admin", "admin"),
    ]:
        user = User.objects.create_user(name, password="pw-123456789")
        user.groups.add(groups[role])
        users[name] = User.objects.get(pk=user.pk)  # fresh permission cache
    seed_profiles()
    return users
