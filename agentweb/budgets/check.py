"""The check before every model call (the runtime's ``Agent(budget=...)`` hook).

A run whose spending so far has reached a budget makes no further model call; the
runtime fails it with a reason that names the budget (``BudgetExceeded.scope``: one of
``SCOPES``). Budgets, in the order they are checked:

- ``max_cost_usd_per_run``, ``max_tokens_per_run`` of the run's profile, and of every run
  above it (a sub-run's spending counts toward its parent's and its top run's);
- ``daily_cost_usd`` of the run's profile and of its top run's profile: what calls made
  by (or under) runs of that profile cost today;
- ``daily_cost_usd`` of the teams the run belongs to.

Calls already on their way when a limit is reached (siblings running at once) finish and
are counted; a limit can therefore be passed by at most one call per running run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Q

from agentweb.budgets import ledger
from agentweb.budgets.models import DailySpend
from agentweb.runs.loading import CLAIMED_PROFILE, CompiledRows
from agentweb.runs.models import AgentProfile, Run
from agentweb.runtime import BudgetExceeded, LoopState
from agentweb.teams.models import Team

SCOPES = ("run_cost", "run_tokens", "profile_daily_cost", "team_daily_cost")
_PER_RUN = ("max_cost_usd_per_run", "max_tokens_per_run")
#: The limits (profiles', teams') are read again after this many seconds of a run.
LIMITS_TTL_SECONDS = 5.0


def _money(value: Decimal | float) -> str:
    return f"${Decimal(str(value)).quantize(Decimal('0.0001'))}"


def _chain(run: Run) -> list[Run]:
    """``run`` and the runs above it, up to its top run."""
    chain = [run]
    while chain[-1].parent_id is not None and len(chain) < 10:
        chain.append(Run.objects.select_related("agent").get(pk=chain[-1].parent_id))
    return chain


def _subtree_spend(run: Run) -> tuple[Decimal, int]:
    """Cost and tokens of ``run`` and every run below it, as stored after each step."""
    if run.parent_id is None:
        rows = Run.objects.filter(Q(pk=run.pk) | Q(root_id=run.pk))
    else:
        rows = Run.objects.filter(Q(pk=run.pk) | Q(parent_id=run.pk) | Q(parent__parent_id=run.pk))
    cost, tokens = Decimal(0), 0
    for usage in rows.values_list("usage", flat=True):
        usage = usage or {}
        cost += Decimal(str(usage.get("cost_usd") or 0))
        tokens += int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    return cost, tokens


def _who(run: Run, this: Run) -> str:
    if run.pk == this.pk:
        return "this run (with its sub-runs)"
    if run.parent_id is None:
        return f"its top run #{run.pk} (with all its sub-runs)"
    return f"run #{run.pk} above it (with its sub-runs)"


_PROFILE_BUDGET = CompiledRows(
    lambda pk: AgentProfile.objects.filter(pk=pk).values_list("pk", "name", "budget"),
    [-7_000_000_012],
)


class Check:
    """The budget check of one run while a worker drives it."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.chain = _chain(run)
        self._limits_at = -LIMITS_TTL_SECONDS
        self._looked = False
        self._profiles: dict[int, tuple[str, dict[str, Any]]] = {}
        self._teams: dict[int, tuple[str, Decimal]] = {}

    def __call__(self, state: LoopState) -> BudgetExceeded | None:
        return self.exceeded()

    def _limits(self) -> None:
        now = time.monotonic()
        if now - self._limits_at < LIMITS_TTL_SECONDS:
            return
        ids = {r.agent_id for r in self.chain}
        found: Iterable[tuple[Any, ...]]
        claimed = None if self._looked else self.run.__dict__.get(CLAIMED_PROFILE)
        if claimed is not None and {claimed[0]} == ids:  # as the worker's claim read it
            found = [claimed]
        elif len(ids) == 1:  # a top run, or a sub-run of its own top run's profile
            found = _PROFILE_BUDGET.rows(*ids)
        else:
            found = AgentProfile.objects.filter(pk__in=ids).values_list("pk", "name", "budget")
        self._profiles = {
            pk: (name, budget if isinstance(budget, dict) else {}) for pk, name, budget in found
        }
        owners = ledger.owners(self.run)
        if not self._looked:  # the first look: read with the owners, one query for both
            rows: Any = owners.team_limits
        else:
            rows = Team.objects.filter(
                pk__in=owners.teams, daily_cost_usd__isnull=False
            ).values_list("pk", "name", "daily_cost_usd")
        self._teams = {pk: (name, limit) for pk, name, limit in rows if limit is not None}
        self._limits_at, self._looked = now, True

    def limited(self) -> bool:
        """Whether any budget applies to this run (its limits as last read, again after
        ``LIMITS_TTL_SECONDS``): the engine stores a run's quick steps together only when
        none does, so that each check sees every call made so far (runs.waiting)."""
        self._limits()
        if self._teams:
            return True
        for run in self.chain:
            budget = self._profiles.get(run.agent_id, ("?", {}))[1]
            if any(budget.get(k) is not None for k in _PER_RUN):
                return True
        return any(
            self._profiles.get(pk, ("?", {}))[1].get("daily_cost_usd") is not None
            for pk in ledger.owners(self.run).profiles
        )

    def exceeded(self) -> BudgetExceeded | None:
        self._limits()
        for run in self.chain:
            name, budget = self._profiles.get(run.agent_id, ("?", {}))
            max_cost, max_tokens = (
                budget.get("max_cost_usd_per_run"),
                budget.get("max_tokens_per_run"),
            )
            if max_cost is None and max_tokens is None:
                continue
            cost, tokens = _subtree_spend(run)
            who = _who(run, self.run)
            if max_cost is not None and cost >= Decimal(str(max_cost)):
                return BudgetExceeded(
                    "run_cost",
                    f"budget exhausted: {who} has cost {_money(cost)}, the "
                    f"max_cost_usd_per_run of profile {name} is {_money(max_cost)}",
                )
            if max_tokens is not None and tokens >= int(max_tokens):
                return BudgetExceeded(
                    "run_tokens",
                    f"budget exhausted: {who} has used {tokens:,} tokens, the "
                    f"max_tokens_per_run of profile {name} is {int(max_tokens):,}",
                )
        daily: dict[tuple[str, int], tuple[str, str, Decimal]] = {}
        for pk in ledger.owners(self.run).profiles:
            name, budget = self._profiles.get(pk, ("?", {}))
            if budget.get("daily_cost_usd") is not None:
                limit = Decimal(str(budget["daily_cost_usd"]))
                daily[(DailySpend.Kind.PROFILE.value, pk)] = (
                    "profile_daily_cost",
                    f"profile {name}",
                    limit,
                )
        for pk, (name, limit) in self._teams.items():
            daily[(DailySpend.Kind.TEAM.value, pk)] = ("team_daily_cost", f"team {name}", limit)
        if not daily:
            return None
        day = ledger.today()
        for key, spent in ledger.spent_today(daily, day).items():
            scope, whose, limit = daily[key]
            if spent >= limit:
                return BudgetExceeded(
                    scope,
                    f"budget exhausted: {whose} has spent {_money(spent)} today ({day}, "
                    f"{settings.TIME_ZONE}), its daily_cost_usd is {_money(limit)}",
                )
        return None


def budget_check(run: Run) -> Callable[[LoopState], BudgetExceeded | None]:
    return Check(run)
