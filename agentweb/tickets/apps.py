from django.apps import AppConfig


class TicketsConfig(AppConfig):
    name = "agentweb.tickets"
    label = "tickets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The rules that start runs listen for arriving tickets, and the pages for the
        # deliveries of replies (imported here: the models are loaded now).
        from agentweb.outbox import actions as outbox
        from agentweb.tickets import actions, intake, replies

        intake.install()
        outbox.on_change(replies.ABOUT, actions.delivery_changed)
