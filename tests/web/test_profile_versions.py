"""An agent's page shows its history, a diff of any two versions, and restores one."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agentweb.accounts.roles import ensure_roles
from agentweb.runs import profiles
from agentweb.runs.models import ProfileVersion

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin() -> tuple[Client, User]:
    groups = ensure_roles()
    user = User.objects.create_user("admin", password="pw-123456789")
    user.groups.add(groups["admin"])
    client = Client()
    client.force_login(user)
    return client, user


def test_history_diff_and_restore_on_the_profile_page(admin) -> None:
    client, user = admin
    profile = profiles.save_profile(
        {"name": "helper", "system_prompt": "Greet <b>them</b>.\nBe brief."}, actor=user
    )
    profiles.save_profile(
        {"system_prompt": "Greet <b>them</b>.\nBe thorough.", "max_iterations": 7},
        profile,
        actor=user,
        partial=True,
    )
    page = client.get(f"/agents/{profile.pk}/").content.decode()
    assert 'id="version-1"' in page and 'id="version-2"' in page
    # default diff: the two newest, each changed field named, text escaped
    diff = page[page.index('id="version-diff"') :]
    assert 'id="change-system_prompt"' in diff and 'id="change-max_iterations"' in diff
    assert "-Be brief." in diff and "+Be thorough." in diff
    assert "&lt;b&gt;them&lt;/b&gt;" in diff and "<b>them</b>" not in diff
    assert 'id="change-name"' not in diff
    same = client.get(f"/agents/{profile.pk}/?a=2&b=2").content.decode()
    assert "Pick two different versions." in same
    response = client.post(f"/agents/{profile.pk}/versions/1/restore/")
    assert response.status_code == 302
    profile.refresh_from_db()
    assert profile.system_prompt.endswith("Be brief.") and profile.max_iterations == 20
    newest = ProfileVersion.objects.filter(profile=profile).order_by("-n").first()
    assert newest is not None and newest.n == 3 and newest.restored_from == 1
    after = client.get(f"/agents/{profile.pk}/").content.decode()
    assert "Restored version 1 of helper as version 3." in after and "(restored v1)" in after
    missing = client.post(f"/agents/{profile.pk}/versions/9/restore/", follow=True)
    assert "no version 9" in missing.content.decode()
    assert ProfileVersion.objects.filter(profile=profile).count() == 3


def test_only_profile_editors_restore(admin) -> None:
    _, user = admin
    profile = profiles.save_profile({"name": "helper", "system_prompt": "p"}, actor=user)
    groups = ensure_roles()
    operator = User.objects.create_user("operator", password="pw-123456789")
    operator.groups.add(groups["operator"])
    client = Client()
    client.force_login(operator)
    assert client.post(f"/agents/{profile.pk}/versions/1/restore/").status_code == 403
    assert ProfileVersion.objects.filter(profile=profile).count() == 1
