"""What a person may see, once teams exist (DESIGN §15): the one rule behind
``Ticket.objects.visible_to``, ``Run.objects.visible_to`` and
``Approval.objects.visible_to``, which every page, API call, socket, export, search and
count goes through.

- No team at all: as before teams, everyone with a role sees every ticket (and, with
  ``view_all_runs``, every run).
- Once any team exists: a person sees the tickets of their teams' queues; the runs on those
  tickets, the runs they started themselves, and runs without a ticket started by someone
  of their teams (a run without a ticket belongs to its starter's teams; a sub-run has its
  top run's ticket and starter); the approvals of the runs they see.
- ``teams.view_all_teams`` (the admin role, superusers) sees everything.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Q

from agentweb.teams.models import Team

#: A scope is worked out once per request; a socket re-reads it after this many seconds.
TTL_SECONDS = 5.0
_CACHE_ATTR = "_agentweb_scope"
_NOTHING = Q(pk__in=[])


@dataclass(frozen=True)
class Scope:
    everything: bool  # admin, superuser, or no team exists
    has_role: bool
    all_runs: bool  # view_all_runs: runs started by others, within the scope
    user_id: int | None
    queues: frozenset[str]
    teammates: frozenset[int]  # ids of everyone in this person's teams, them included

    def tickets(self) -> Q:
        if not self.has_role:
            return _NOTHING
        if self.everything:
            return Q()
        return Q(queue__in=sorted(self.queues)) if self.queues else _NOTHING

    def runs(self, prefix: str = "") -> Q:
        """A filter on runs (``prefix``: the path to the run, e.g. ``"run__"``)."""
        own = Q(**{f"{prefix}created_by_id": self.user_id})
        if not self.has_role:
            return _NOTHING
        if not self.all_runs:
            return own
        if self.everything:
            return Q()
        seen = own
        if self.queues:
            seen |= Q(**{f"{prefix}ticket__queue__in": sorted(self.queues)})
        seen |= Q(**{f"{prefix}ticket__isnull": True, f"{prefix}created_by_id__in": self.teammates})
        return seen


def teams_exist() -> bool:
    return Team.objects.exists()


def scope_for(user: Any) -> Scope:
    """``user``'s scope, kept on the user object for ``TTL_SECONDS`` (one request; a
    socket's scope user lives longer and picks up team changes after that)."""
    now = time.monotonic()
    cached = getattr(user, _CACHE_ATTR, None)
    if cached is not None and now - cached[0] < TTL_SECONDS:
        return cached[1]
    scope = _compute(user)
    with contextlib.suppress(AttributeError):  # AnonymousUser and the like
        setattr(user, _CACHE_ATTR, (now, scope))
    return scope


def forget(user: Any) -> None:
    """Work the scope out afresh next time (after changing this user's teams)."""
    if hasattr(user, _CACHE_ATTR):
        delattr(user, _CACHE_ATTR)


def _compute(user: Any) -> Scope:
    if user is None or not user.is_authenticated:
        return Scope(False, False, False, None, frozenset(), frozenset())
    has_role = bool(user.has_perm("runs.view_run"))
    all_runs = bool(user.has_perm("runs.view_all_runs"))
    if user.has_perm("teams.view_all_teams") or not teams_exist():
        return Scope(True, has_role, all_runs, user.pk, frozenset(), frozenset())
    queues: set[str] = set()
    for team_queues in Team.objects.filter(members=user).values_list("queues", flat=True):
        queues.update(team_queues or [])
    teammates = set(
        User.objects.filter(teams__members=user).values_list("pk", flat=True).distinct()
    )
    teammates.add(user.pk)
    return Scope(False, has_role, all_runs, user.pk, frozenset(queues), frozenset(teammates))


def who_sees(ticket_queue: str | None, starter_id: int) -> Q:
    """A filter on users: who sees a run on a ticket of ``ticket_queue`` (None: a run
    without a ticket) started by ``starter_id``. Roles and four-eyes are the caller's."""
    if not teams_exist():
        return Q()
    see_all = User.objects.filter(
        Q(is_superuser=True)
        | Q(
            groups__permissions__codename="view_all_teams",
            groups__permissions__content_type__app_label="teams",
        )
        | Q(
            user_permissions__codename="view_all_teams",
            user_permissions__content_type__app_label="teams",
        )
    )
    if ticket_queue is None:
        teams = Team.objects.filter(members=starter_id)
    else:
        teams = Team.objects.filter(queues__contains=[ticket_queue])
    members = User.objects.filter(teams__in=teams)
    return Q(pk__in=see_all.values("pk")) | Q(pk__in=members.values("pk")) | Q(pk=starter_id)
