"""What the budgets app plugs into the runs app once Django is ready (``apps.py``): the
ledger sees every stored batch in its transaction, and every run's agent gets the check
before its model calls. Imported by ``BudgetsConfig.ready`` only: it imports models."""

from __future__ import annotations

from agentweb.budgets import check, ledger
from agentweb.runs import store, wiring


def install() -> None:
    store.on_events_stored(ledger.events_stored)
    wiring.on_budget_check(check.budget_check)
