from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "agentweb.tickets"
    label = "tickets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The rules that start runs listen for arriving tickets (models are loaded now).
        from agentweb.tickets import intake

        intake.install()
