"""Plain words (DESIGN §16): Django admin's names, durations in words, the one page a user
without a role sees (and no API tokens for them)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.accounts.roles import ensure_roles
from agentweb.web.templatetags.agentweb_ui import in_words

pytestmark = pytest.mark.django_db


def test_every_admin_list_is_named_in_english() -> None:
    names = {m._meta.label: str(m._meta.verbose_name_plural) for m in admin.site._registry}
    wrong = {label: name for label, name in names.items() if re.search(r"[^aeiou]ys$", name)}
    assert wrong == {}  # "Customer replys", "deliverys", "identitys"
    assert names["tickets.WebhookDelivery"] == "webhook deliveries"
    assert names["shop.KBArticle"] == "knowledge base articles"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (timedelta(minutes=15), "15 minutes"),
        (timedelta(minutes=1), "1 minute"),
        (timedelta(hours=1, minutes=30), "1 hour 30 minutes"),
        (timedelta(days=2, seconds=5), "2 days 5 seconds"),
        (timedelta(seconds=45), "45 seconds"),
        (90, "1 minute 30 seconds"),
        (timedelta(0), "a moment"),
        ("PT15M", ""),
    ],
)
def test_durations_in_words(value: object, words: str) -> None:
    assert in_words(value) == words


@pytest.fixture
def newcomer() -> User:
    ensure_roles()
    return User.objects.create_user("newcomer", password="pw-123456789")


def test_no_role_is_one_page_that_says_to_ask_an_admin(newcomer: User) -> None:
    client = Client()
    client.force_login(newcomer)
    for path in ("/", "/tickets/", "/runs/", "/approvals/", "/account/tokens/"):
        response = client.get(path, follow=True)
        body = response.content.decode()
        assert response.status_code == 403, path
        assert "Your account has no role yet" in body and "ask an administrator" in body, path
        assert "fix the input" not in body, path
        for link in ('href="/tickets/"', 'href="/runs/"', 'href="/approvals/"',
                     'href="/agents/"', 'href="/account/tokens/"'):  # fmt: skip
            assert link not in body, (path, link)
        assert 'action="/accounts/logout/"' in body
    response = client.post("/account/tokens/", {"name": "sneaky"})
    assert response.status_code == 403
    assert not ApiToken.objects.filter(user=newcomer).exists()


def test_a_role_still_has_its_menu_and_tokens() -> None:
    groups = ensure_roles()
    user = User.objects.create_user("op", password="pw-123456789")
    user.groups.add(groups["operator"])
    client = Client()
    client.force_login(user)
    body = client.get("/runs/").content.decode()
    for link in (
        'href="/tickets/"',
        'href="/runs/"',
        'href="/approvals/"',
        'href="/account/tokens/"',
    ):
        assert link in body, link
    assert client.post("/account/tokens/", {"name": "mine"}).status_code == 302
    assert ApiToken.objects.filter(user=user).count() == 1
