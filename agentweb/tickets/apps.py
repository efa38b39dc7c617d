from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "agentweb.tickets"
    label = "tickets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Inside ready(): the wiring imports models, which need the apps loaded.
        from agentweb.tickets import wiring

        wiring.install()
