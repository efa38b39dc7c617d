from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "agentweb.notify"
    label = "notify"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Inside ready(): these modules import models, which need the apps loaded.
        from agentweb.notify import events
        from agentweb.outbox import actions as outbox
        from agentweb.runs import store

        store.on_events_stored(events.events_stored)
        # A delivery that changes state changes what the approval cards say.
        outbox.on_change(events.ABOUT, events.deliveries_changed)
