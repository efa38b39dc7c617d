"""Spend per team and per profile for one day, as the API sends it and the page shows it.
The shapes are pydantic models: the API's output and its OpenAPI schema come from them."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.conf import settings
from pydantic import BaseModel, Field

from agentweb.budgets.models import DailySpend
from agentweb.runs.models import AgentProfile
from agentweb.teams.models import Team


class Spend(BaseModel):
    """What one team's or profile's model calls cost on the day."""

    id: int
    name: str
    cost_usd: float = Field(description="estimated US dollars (calls of unpriced models: 0)")
    tokens: int
    model_calls: int
    unpriced_calls: int = Field(description="calls of models without a known price")
    daily_cost_usd: float | None = Field(description="the daily limit; null: none")
    used: float | None = Field(description="cost_usd / daily_cost_usd; null without a limit")


class ProfileSpend(Spend):
    max_cost_usd_per_run: float | None = None
    max_tokens_per_run: int | None = None


class SpendReport(BaseModel):
    """``GET /api/spend?day=YYYY-MM-DD`` (admins): a profile's spend includes the calls of
    sub-runs under its runs; a run's calls count toward the teams it belongs to."""

    day: date
    time_zone: str
    teams: list[Spend]
    profiles: list[ProfileSpend]


def _used(cost: Decimal, limit: float | None) -> float | None:
    if limit is None:
        return None
    return round(float(cost) / limit, 4) if limit else (1.0 if cost else 0.0)


def report(day: date) -> SpendReport:
    rows = {(r.kind, r.ref): r for r in DailySpend.objects.filter(day=day)}
    zero = DailySpend()

    def spend_of(kind: str, ref: int) -> DailySpend:
        return rows.get((kind, ref), zero)

    teams = []
    for team in Team.objects.order_by("name"):
        row = spend_of(DailySpend.Kind.TEAM, team.pk)
        limit = float(team.daily_cost_usd) if team.daily_cost_usd is not None else None
        teams.append(
            Spend(
                id=team.pk,
                name=team.name,
                cost_usd=float(row.cost_usd or 0),
                tokens=row.tokens or 0,
                model_calls=row.model_calls or 0,
                unpriced_calls=row.unpriced_calls or 0,
                daily_cost_usd=limit,
                used=_used(Decimal(row.cost_usd or 0), limit),
            )
        )
    profiles = []
    for profile in AgentProfile.objects.order_by("name").only("pk", "name", "budget"):
        row = spend_of(DailySpend.Kind.PROFILE, profile.pk)
        budget = profile.budget if isinstance(profile.budget, dict) else {}
        limit = budget.get("daily_cost_usd")
        profiles.append(
            ProfileSpend(
                id=profile.pk,
                name=profile.name,
                cost_usd=float(row.cost_usd or 0),
                tokens=row.tokens or 0,
                model_calls=row.model_calls or 0,
                unpriced_calls=row.unpriced_calls or 0,
                daily_cost_usd=float(limit) if limit is not None else None,
                used=_used(Decimal(row.cost_usd or 0), float(limit) if limit is not None else None),
                max_cost_usd_per_run=budget.get("max_cost_usd_per_run"),
                max_tokens_per_run=budget.get("max_tokens_per_run"),
            )
        )
    return SpendReport(day=day, time_zone=settings.TIME_ZONE, teams=teams, profiles=profiles)
