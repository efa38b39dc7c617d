"""Teams are made with ``manage.py teams`` or in ``/admin/``, both through do_save_team."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from agentweb.runs.models import AuditEntry
from agentweb.teams.models import Team

pytestmark = pytest.mark.django_db


def teams(*args: str) -> str:
    out = io.StringIO()
    call_command("teams", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def people() -> dict[str, User]:
    return {n: User.objects.create_user(n, password="pw-123456789") for n in ("ann", "ben", "cy")}


def test_it_adds_changes_lists_and_removes_teams(people: dict[str, User]) -> None:
    said = teams("add", "Billing", "--queues", "billing, refunds,billing", "--members", "ann,ben")
    assert said.startswith("added team Billing")
    team = Team.objects.get(name="Billing")
    assert team.queues == ["billing", "refunds"] and team.daily_cost_usd is None
    assert set(team.members.values_list("username", flat=True)) == {"ann", "ben"}
    teams("set", "Billing", "--daily-cost-usd", "12.5", "--members", "cy")
    team.refresh_from_db()
    assert str(team.daily_cost_usd) == "12.5000" and team.queues == ["billing", "refunds"]
    assert list(team.members.values_list("username", flat=True)) == ["cy"]
    assert (
        teams("list").strip() == "Billing: queues=billing,refunds members=cy daily_cost_usd=12.5000"
    )
    teams("set", "Billing", "--daily-cost-usd", "")
    team.refresh_from_db()
    assert team.daily_cost_usd is None
    assert teams("remove", "Billing").strip() == "removed team Billing"
    assert not Team.objects.exists()
    actions = list(AuditEntry.objects.order_by("at", "pk").values_list("action", flat=True))
    assert actions == ["team_created", "team_changed", "team_changed", "team_deleted"]
    changed = AuditEntry.objects.filter(action="team_changed").order_by("at", "pk").first()
    assert changed is not None
    assert changed.data["before"]["members"] == ["ann", "ben"]
    assert changed.data["after"]["members"] == ["cy"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["add", "X", "--members", "ann,nobody"], "members: no user named 'nobody'"),
        (["add", "X", "--daily-cost-usd", "lots"], "daily_cost_usd: 'lots' is not a number"),
        (["add", "X", "--daily-cost-usd", "-1"], "daily_cost_usd: a number of dollars, 0 or more"),
        (["add", "X", "--daily-cost-usd", "NaN"], "daily_cost_usd"),
        (["add", "X", "--queues", "a" * 101], "queues:"),
        (["add", "Taken"], "a team named 'Taken' exists"),
        (["set", "Nope"], "no team named 'Nope'"),
        (["remove", "Nope"], "no team named 'Nope'"),
    ],
)
def test_bad_input_is_named_and_nothing_changes(
    people: dict[str, User], args: list[str], says: str
) -> None:
    teams("add", "Taken", "--queues", "q")
    with pytest.raises(CommandError) as caught:
        teams(*args)
    assert says in str(caught.value)
    assert list(Team.objects.values_list("name", flat=True)) == ["Taken"]


def test_the_admin_site_saves_through_the_action(people: dict[str, User]) -> None:
    root = User.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client = Client()
    client.force_login(root)
    answer = client.post(
        "/admin/teams/team/add/",
        {
            "name": "Shipping",
            "queues_text": "shipping, returns",
            "members": [people["ann"].pk],
            "daily_cost_usd": "3",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    team = Team.objects.get(name="Shipping")
    assert team.queues == ["shipping", "returns"]
    assert list(team.members.values_list("username", flat=True)) == ["ann"]
    assert AuditEntry.objects.get(action="team_created").actor == root
    page = client.get(f"/admin/teams/team/{team.pk}/change/")
    assert page.status_code == 200 and "shipping, returns" in page.content.decode()
    bad = client.post(
        f"/admin/teams/team/{team.pk}/change/",
        {"name": "Shipping", "queues_text": "x" * 101, "members": [], "daily_cost_usd": ""},
    )
    assert bad.status_code == 200 and "is not a queue name" in bad.content.decode()
    assert Team.objects.get(pk=team.pk).queues == ["shipping", "returns"]
