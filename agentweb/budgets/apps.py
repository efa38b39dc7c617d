from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "agentweb.budgets"
    label = "budgets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Inside ready(): the wiring imports models, which need the apps loaded.
        from agentweb.budgets import wiring

        wiring.install()
