"""Why an action refused: the exceptions every write raises, in a module of their own.

Views, the API, commands and tasks catch them; ``code`` and ``status`` map to the API's
error format (``{"error": {"code", "message"}}``).
"""

from __future__ import annotations

from typing import Any


class ActionError(Exception):
    """A refused action; ``code`` and ``status`` map to the API's error format."""

    code = "invalid"
    status = 400

    def __init__(self, message: str, *, details: Any = None, extra: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.extra: dict[str, Any] = dict(extra or {})  # top-level keys beside "error"


class NotAllowed(ActionError):
    code, status = "forbidden", 403


class Conflict(ActionError):
    code, status = "conflict", 409


class TicketBusy(Conflict):
    """The ticket has a run that is not finished; ``extra["active_run"]`` names it."""

    code = "ticket_busy"


class InvalidArguments(ActionError):
    code, status = "invalid_arguments", 422


class ReasonRequired(ActionError):
    """A reject without a reason (the model reads it: it must say why)."""

    code = "reason_required"


class NotFound(ActionError):
    code, status = "not_found", 404


class ProfileInUse(Conflict):
    """A profile that runs refer to, or that others delegate to, is kept."""
