"""What each JSON API endpoint accepts: one pydantic model per request body.

``api.py`` parses a body with ``Model.parse(data)``; ``openapi.py`` describes the same
body with ``request_schema(Model)``, so the document cannot drift from the parser. A
refused field raises the action error and message its model names in ``refusals``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from agentweb.runs.actions import ActionError, InvalidArguments


class Input(BaseModel):
    """A request body: strict JSON types, unknown keys ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")

    #: field -> (error, message) when its value is refused
    refusals: ClassVar[dict[str, tuple[type[ActionError], str]]] = {}

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Self:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            if not first["loc"]:  # a rule across fields: its own words
                raise ActionError(str(first.get("ctx", {}).get("error", first["msg"]))) from None
            field = str(first["loc"][0])
            kind, message = cls.refusals.get(field, (ActionError, f"{field}: {first['msg']}"))
            raise kind(message) from None


class StartRun(Input):
    """Start a run on a task, or on a ticket alone (its subject and body become the task)."""

    model_config = ConfigDict(
        strict=True,
        extra="ignore",
        json_schema_extra={"anyOf": [{"required": ["task"]}, {"required": ["ticket"]}]},
    )

    task: str = ""
    agent: str | None = None
    ticket: int | None = None

    refusals: ClassVar[dict[str, tuple[type[ActionError], str]]] = {
        "task": (ActionError, "task must be a string"),
        "agent": (ActionError, "agent must be a string"),
        "ticket": (ActionError, "ticket must be an integer id"),
    }

    @model_validator(mode="after")
    def _task_or_ticket(self) -> Self:
        if not self.task.strip() and self.ticket is None:
            raise ValueError("task must not be empty")
        return self


class DecideApproval(Input):
    """Approve (optionally with edited arguments) or reject a pending call."""

    arguments: dict[str, Any] | None = None
    comment: str = ""
    decision: Literal["approve", "reject"]

    refusals: ClassVar[dict[str, tuple[type[ActionError], str]]] = {
        "arguments": (InvalidArguments, "arguments must be a JSON object"),
        "comment": (ActionError, "comment must be a string"),
        "decision": (ActionError, "decision must be 'approve' or 'reject'"),
    }


def request_schema(model: type[Input]) -> dict[str, Any]:
    """The JSON schema of a request body, for the OpenAPI document (without titles)."""
    return _untitled(model.model_json_schema())


def _untitled(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untitled(v) for k, v in value.items() if k != "title"}
    if isinstance(value, list):
        return [_untitled(v) for v in value]
    return value
