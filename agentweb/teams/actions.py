"""Writing teams: ``manage.py teams`` and ``/admin/`` both go through ``do_save_team``, which
checks the input, stores it and writes the audit line (before and after)."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from agentweb.middleware import bad_chars
from agentweb.runs.store import audit
from agentweb.teams.models import MAX_QUEUE, Team


class TeamError(ValueError):
    """Input we refuse; the message names the field."""


def clean_name(name: str) -> str:
    name = " ".join((name or "").split())
    if not name:
        raise TeamError("name: a team needs a name")
    if len(name) > 100 or bad_chars(name):
        raise TeamError("name: at most 100 characters of plain text")
    return name


def clean_queues(queues: Iterable[str]) -> list[str]:
    out: list[str] = []
    for raw in queues:
        queue = (raw or "").strip()
        if not queue:
            continue
        if len(queue) > MAX_QUEUE or bad_chars(queue):
            raise TeamError(f"queues: {queue[:40]!r} is not a queue name (at most {MAX_QUEUE})")
        if queue not in out:
            out.append(queue)
    return out


def clean_cost(value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        cost = Decimal(str(value).strip())
    except InvalidOperation:
        raise TeamError(f"daily_cost_usd: {value!r} is not a number of dollars") from None
    if not cost.is_finite() or cost < 0:
        raise TeamError("daily_cost_usd: a number of dollars, 0 or more")
    if cost >= Decimal("1e8"):
        raise TeamError("daily_cost_usd: at most 99,999,999.99")
    return cost.quantize(Decimal("0.0001"))


def members_named(usernames: Iterable[str]) -> list[User]:
    names = [n.strip() for n in usernames if n and n.strip()]
    found = {u.username: u for u in User.objects.filter(username__in=names)}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise TeamError(f"members: no user named {', '.join(repr(n) for n in unknown)}")
    return [found[n] for n in dict.fromkeys(names)]


def _snapshot(team: Team) -> dict[str, Any]:
    return {
        "name": team.name,
        "queues": list(team.queues),
        "members": sorted(team.members.values_list("username", flat=True)) if team.pk else [],
        "daily_cost_usd": str(team.daily_cost_usd) if team.daily_cost_usd is not None else None,
    }


def do_save_team(
    team: Team | None,
    *,
    actor: User | None,
    name: str,
    queues: Iterable[str],
    members: Iterable[User] | None,
    daily_cost_usd: Any = None,
) -> Team:
    """Create (``team`` None) or change a team; ``members`` None leaves them as they are."""
    name = clean_name(name)
    clean = clean_queues(queues)
    cost = clean_cost(daily_cost_usd)
    with transaction.atomic():
        same_name = Team.objects.filter(name=name)
        if team is not None:
            same_name = same_name.exclude(pk=team.pk)
        if same_name.exists():
            raise TeamError(f"name: a team named {name!r} exists")
        before = _snapshot(team) if team is not None else None
        team = team or Team()
        team.name, team.queues, team.daily_cost_usd = name, clean, cost
        team.save()
        if members is not None:
            team.members.set(list(members))
        audit(
            "team_created" if before is None else "team_changed",
            actor=actor,
            run=None,
            team=team.pk,
            before=before,
            after=_snapshot(team),
        )
    return team


def do_delete_team(team: Team, *, actor: User | None) -> None:
    with transaction.atomic():
        audit("team_deleted", actor=actor, run=None, team=team.pk, before=_snapshot(team))
        team.delete()
