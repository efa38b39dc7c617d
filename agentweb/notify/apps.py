from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "agentweb.notify"
    label = "notify"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Inside ready(): the wiring imports models, which need the apps loaded.
        from agentweb.notify import wiring

        wiring.install()
