from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "agentweb.runs"
    label = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Load our Celery app in every Django process (web included), so tasks sent from
        # there go to our broker. Not in agentweb/__init__: the runtime must stay Django-free.
        import agentweb.celery  # noqa: F401
