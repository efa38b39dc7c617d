"""Adding model calls to the ledger, and reading it back.

A call's cost counts toward its run's profile and, for a sub-run, its top run's profile
too, and toward the teams its run belongs to: the teams owning its (top run's) ticket's
queue, or, for a run without a ticket, its starter's teams (as ``teams.scope`` sees runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import connection
from django.utils import timezone

from agentweb.budgets.models import DailySpend
from agentweb.runs import store
from agentweb.runs.loading import CompiledRows
from agentweb.runs.models import Run, RunEvent
from agentweb.teams.models import Team

_OWNERS_ATTR = "_budget_owners"


@dataclass(frozen=True)
class Owners:
    profiles: tuple[int, ...]  # the run's profile, then its top run's (when another)
    teams: tuple[int, ...]
    #: (id, name, daily_cost_usd) of those teams that have a daily limit, as read with
    #: them (the budget check's first look; it reads them again later).
    team_limits: tuple[tuple[int, str, Decimal], ...] = ()


def today() -> date:
    """The installation's day (``TIME_ZONE``)."""
    return timezone.localdate()


def top_of(run: Run) -> Run:
    if run.root_id is None or run.root_id == run.pk:
        return run
    return Run.objects.select_related("agent", "ticket").get(pk=run.root_id)


_TEAM_COLUMNS = ("pk", "name", "daily_cost_usd")
_TEAMS_OF_QUEUE = CompiledRows(
    lambda queue: Team.objects.filter(queues__contains=[queue]).values_list(*_TEAM_COLUMNS),
    ["agentweb: a stand-in queue"],
)
_TEAMS_OF_MEMBER = CompiledRows(
    lambda user: Team.objects.filter(members=user).values_list(*_TEAM_COLUMNS),
    [-7_000_000_011],
)


#: ``owners``' teams of a top run, read in its worker's claim (``loading.read_with_claim``,
#: registered by ``budgets.wiring``) instead of a query of their own at the first check:
#: the function (migration 0002) finds them as ``owners`` does, with plans PostgreSQL
#: keeps per session (the same query in SQL was planned again at every claim: 0.2 ms).
TEAMS_AT_CLAIM = "SELECT team_id, team_name, team_limit FROM budget_teams_of_run(%s)"
_CLAIMED_TEAMS_ATTR = "_budget_teams_at_claim"


def keep_claimed_teams(run: Run, rows: list[tuple[Any, ...]]) -> None:
    setattr(run, _CLAIMED_TEAMS_ATTR, rows)


def owners(run: Run) -> Owners:
    """Whose budgets ``run``'s calls count toward (kept on the run object while a worker
    drives it: its ticket's queue or its teams changing mid-run apply to its next drive)."""
    cached = getattr(run, _OWNERS_ATTR, None)
    if cached is not None:
        return cached
    top = top_of(run)
    profiles = tuple(dict.fromkeys([run.agent_id, top.agent_id]))
    claimed = getattr(top, _CLAIMED_TEAMS_ATTR, None)
    if claimed is not None:  # read with the claim, a moment ago
        teams = claimed
    elif top.ticket_id is not None:
        queue = top.ticket.queue if top.ticket is not None else None
        teams = _TEAMS_OF_QUEUE.rows(queue) if queue else []
    else:
        teams = _TEAMS_OF_MEMBER.rows(top.created_by_id)
    rows = sorted(set(teams))
    found = Owners(
        profiles,
        tuple(pk for pk, _, _ in rows),
        tuple((pk, name, limit) for pk, name, limit in rows if limit is not None),
    )
    setattr(run, _OWNERS_ATTR, found)
    return found


def events_stored(run: Run, rows: list[RunEvent]) -> None:
    """The runs store's hook (``store.on_events_stored``): a batch's model calls, in the
    transaction that stores them, so a rolled-back step adds nothing."""
    calls = [{"type": r.type, "data": r.data} for r in rows if r.type == "model_called"]
    if calls:
        record(run, calls)


def record(run: Run, events: Iterable[Mapping[str, Any]]) -> None:
    """Add the model calls among ``events`` (priced: ``data.cost_usd``) to today's rows, in
    the caller's transaction (the step's). One statement; rows in a fixed order, so two
    steps adding to the same rows cannot deadlock."""
    cost, tokens, calls, unpriced = Decimal(0), 0, 0, 0
    for event in events:
        if event["type"] != "model_called":
            continue
        data = event["data"]
        used = data.get("tokens") or {}
        tokens += int(used.get("input") or 0) + int(used.get("output") or 0)
        calls += 1
        if data.get("cost_usd") is None:
            unpriced += 1
        else:
            cost += Decimal(str(data["cost_usd"]))
    if not calls:
        return
    who = owners(run)
    day = today()
    keys = sorted(
        [(DailySpend.Kind.PROFILE.value, p) for p in who.profiles]
        + [(DailySpend.Kind.TEAM.value, t) for t in who.teams]
    )
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(keys))
    params: list[Any] = []
    for kind, ref in keys:
        params += [day, kind, ref, cost, tokens, calls, unpriced]
    table = DailySpend._meta.db_table
    sql = (
        # only our table's name and placeholders are formatted in
        f"INSERT INTO {table} (day, kind, ref, cost_usd, tokens, model_calls, unpriced_calls) "  # noqa: S608
        f"VALUES {values} ON CONFLICT (day, kind, ref) DO UPDATE SET "
        f"cost_usd = {table}.cost_usd + EXCLUDED.cost_usd, "
        f"tokens = {table}.tokens + EXCLUDED.tokens, "
        f"model_calls = {table}.model_calls + EXCLUDED.model_calls, "
        f"unpriced_calls = {table}.unpriced_calls + EXCLUDED.unpriced_calls"
    )
    batch = store.step_batch()
    if batch is not None:  # with the step's other writes, in its one round trip
        batch.add(sql, params)
        return
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def spent_today(
    keys: Iterable[tuple[str, int]], day: date | None = None
) -> dict[tuple[str, int], Decimal]:
    """Today's cost per (kind, ref); missing rows spent nothing."""
    wanted = list(keys)
    if not wanted:
        return {}
    rows = DailySpend.objects.filter(day=day or today(), ref__in={ref for _, ref in wanted})
    found = {(r.kind, r.ref): r.cost_usd for r in rows}
    return {key: found.get(key, Decimal(0)) for key in wanted}
