from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Our Celery app is loaded in every Django process (web included), so tasks sent from
# there go to our broker. Not in agentweb/__init__: the runtime must stay Django-free.
import agentweb.celery  # noqa: F401
from agentweb.dbpool import tidy_tool_thread
from agentweb.observability import steps as observe
from agentweb.runs import agents, hooks, toolset
from agentweb.runtime.execution import around_tool_calls
from agentweb.runtime.gateway import ConfigError


class RunsConfig(AppConfig):
    name = "agentweb.runs"
    label = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The pool's threads hand their connection back after each call; a quick tool
        # run in the run's own thread uses the run thread's connection, which the engine
        # hands back before each step (dbpool.give_back).
        around_tool_calls(before=tidy_tool_thread, after=tidy_tool_thread, pool_only=True)
        # Spans and metrics are made of the stored steps, after commit.
        hooks.on_step_stored(observe.record, observe.INTERESTING)
        check_agent_configuration()


def check_agent_configuration() -> None:
    """Bad model or tool configuration stops start-up, naming the variable, instead of
    failing the first run an operator starts."""
    try:  # the tools first: the demo model comes from a tool module
        toolset.registry()
    except ImportError as exc:
        raise ImproperlyConfigured(f"AGENTWEB_TOOLS: cannot import {exc.name!r}: {exc}") from None
    except ValueError as exc:
        raise ImproperlyConfigured(f"AGENTWEB_TOOLS: {exc}") from None
    try:
        agents.model_for(settings.AGENTWEB_MODEL)
    except ConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from None
