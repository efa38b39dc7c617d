"""What the budgets app plugs into the runs app once Django is ready (``apps.py``): the
ledger sees every stored batch in its transaction, every run's agent gets the check
before its model calls, and the worker's claim of a run reads the teams it counts toward.
Imported by ``BudgetsConfig.ready`` only: it imports models."""

from __future__ import annotations

from agentweb.budgets import check, ledger
from agentweb.runs import loading, store, wiring


def install() -> None:
    store.on_events_stored(ledger.events_stored)
    wiring.on_budget_check(check.budget_check)
    # The first check's teams come with the worker's claim of the run: no query of their own.
    loading.read_with_claim(ledger.TEAMS_AT_CLAIM, ledger.keep_claimed_teams)
