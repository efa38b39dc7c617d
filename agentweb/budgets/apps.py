from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "agentweb.budgets"
    label = "budgets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Inside ready(): these modules import models, which need the apps loaded. The
        # runs app asks whoever registers: the ledger sees every stored batch in its
        # transaction, and every run's agent gets the check before its model calls.
        from agentweb.budgets import check, ledger
        from agentweb.runs import store, wiring

        store.on_events_stored(ledger.events_stored)
        wiring.on_budget_check(check.budget_check)
