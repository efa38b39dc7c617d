"""What each JSON API endpoint accepts: one pydantic model per request body.

``api.py`` parses a body with ``Model.parse(data)``; ``openapi.py`` describes the same
body with ``request_schema(Model)``, so the document cannot drift from the parser. A
refused field raises the action error and message its model names in ``refusals``.

Agent profiles are read with ``Model.read(data)`` (by ``profiles.save_profile``, for the
API and ``agents import``): the fields given, and every refusal by field (422 names each).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from agentweb.runs.errors import ActionError, InvalidArguments
from agentweb.runs.profile_rules import FIELDS, MAX_TOP_N


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
    mode: Literal["normal", "dry"] = Field(
        "normal",
        description="dry: medium/high-risk tools never execute (each call is recorded with "
        "what it would have done), no approval is asked; not counted as the ticket's run",
    )

    refusals: ClassVar[dict[str, tuple[type[ActionError], str]]] = {
        "task": (ActionError, "task must be a string"),
        "agent": (ActionError, "agent must be a string"),
        "ticket": (ActionError, "ticket must be an integer id"),
        "mode": (ActionError, "mode must be 'normal' or 'dry'"),
    }

    @model_validator(mode="after")
    def _task_or_ticket(self) -> Self:
        if not self.task.strip() and self.ticket is None:
            raise ValueError("task must not be empty")
        return self


class DecideApproval(Input):
    """Approve (optionally with edited arguments) or reject a pending call."""

    arguments: dict[str, Any] | None = Field(
        None, description="approve with these arguments instead (checked by the tool: 422)"
    )
    comment: str = Field(
        "", description="required and non-empty to reject: it goes back to the model"
    )
    decision: Literal["approve", "reject"]

    refusals: ClassVar[dict[str, tuple[type[ActionError], str]]] = {
        "arguments": (InvalidArguments, "arguments must be a JSON object"),
        "comment": (ActionError, "comment must be a string"),
        "decision": (ActionError, "decision must be 'approve' or 'reject'"),
    }


# --- agent profiles ---------------------------------------------------------------------

_STRING = "must be a string"
_NAMES = "must be a list of names"
_BY_TOOL = "must be an object keyed by tool name"
_WHOLE = "must be a whole number"
_SELECTION = f'"all" or a whole number from 1 to {MAX_TOP_N}'

#: In model form, a null is the field's blank value.
_BLANK: dict[str, Any] = {
    "description": "",
    "model": "",
    "validator": "",
    "tool_selection": "all",
    "allowed_tools": [],
    "delegates": [],
    "approval_policies": {},
    "risk_overrides": {},
    "budget": {},
}

ToolSelection = Annotated[
    int | str | None,
    WithJsonSchema(
        {
            "oneOf": [
                {"const": "all"},
                {"type": "integer", "minimum": 1, "maximum": MAX_TOP_N},
            ],
            "description": '"all": offer every allowed tool; N: the N most relevant and '
            "search_tools",
        }
    ),
]


class Budget(BaseModel):
    """What runs of a profile may spend (DESIGN §15). Sub-runs count toward their top
    run; a day is the installation's TIME_ZONE day; a run that has reached a limit makes
    no further model call and fails naming it."""

    model_config = ConfigDict(strict=True, extra="forbid")

    max_cost_usd_per_run: float | None = Field(
        None, ge=0, le=1e9, description="US dollars a run (with its sub-runs) may cost"
    )
    max_tokens_per_run: int | None = Field(
        None, ge=1, description="tokens (input and output) a run (with its sub-runs) may use"
    )
    daily_cost_usd: float | None = Field(
        None, ge=0, le=1e9, description="US dollars the profile's runs may cost per day"
    )


def _budget_value(value: Any) -> dict[str, Any]:
    """A profile's budget as stored (the limits set), or ValueError saying what is wrong."""
    try:
        return Budget.model_validate(value).model_dump(exclude_none=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"]) or "budget"
        if error["type"] == "extra_forbidden":
            known = ", ".join(Budget.model_fields)
            raise ValueError(f"unknown key {key!r}; known: {known}") from None
        if key == "max_tokens_per_run":
            raise ValueError(f"{key} must be a whole number of tokens, 1 or more") from None
        if key in Budget.model_fields:
            raise ValueError(f"{key} must be a number of US dollars, 0 or more") from None
        raise ValueError(error["msg"]) from None


#: The budget's schema, generated from the model that checks it.
BudgetField = Annotated[
    dict[str, Any] | None,
    WithJsonSchema(
        {
            "anyOf": [
                {k: v for k, v in Budget.model_json_schema().items() if k != "title"},
                {"type": "null"},
            ],
            "description": "what runs of this profile may spend; {} or null: no limits",
        }
    ),
]


def _profile_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    for name in getattr(model, "undocumented_defaults", ()):
        schema["properties"][name].pop("default", None)


class ProfileFields(Input):
    """The fields of an agent profile, as GET shows them. The endpoints read them with
    CreateProfile (POST), ReplaceProfile (PUT) and ChangeProfile (PATCH); updated_at, which
    GET shows, is ignored, other unknown fields are refused."""

    model_config = ConfigDict(strict=True, extra="forbid", json_schema_extra=_profile_schema)

    name: str = Field("", json_schema_extra={"pattern": "^[-a-zA-Z0-9_]+$"})
    description: str | None = ""
    system_prompt: str = ""
    model: str | None = Field(None, description="null: the installation's AGENTWEB_MODEL")
    allowed_tools: list[str] | None = Field(
        [],
        description="tool names; an MCP server's as <server>__<tool>, or all of them as "
        "<server>__*; empty: every tool of the AGENTWEB_TOOLS modules and no MCP server's",
    )
    tool_selection: ToolSelection = "all"
    validator: str | None = Field(None, description="dotted path of a completion validator")
    approval_policies: dict[str, Any] | None = Field(
        {}, description='per tool: "always", "never" or {"argument", "at_least", "sum_per"}'
    )
    risk_overrides: dict[str, Any] | None = Field(
        {}, description='per tool: "low", "medium" or "high"'
    )
    max_iterations: int = 20
    context_budget_tokens: int = 16000
    delegates: list[str] | None = Field([], description="profiles this one may hand work to")
    vision: bool = True
    budget: BudgetField = {}

    #: field -> what is wrong when its value has the wrong type
    type_errors: ClassVar[dict[str, str]] = {
        "name": _STRING,
        "description": _STRING,
        "system_prompt": _STRING,
        "model": _STRING,
        "validator": _STRING,
        "allowed_tools": _NAMES,
        "delegates": _NAMES,
        "tool_selection": _SELECTION,
        "approval_policies": _BY_TOOL,
        "risk_overrides": _BY_TOOL,
        "max_iterations": _WHOLE,
        "context_budget_tokens": _WHOLE,
        "vision": "must be true or false",
        "budget": "an object with any of max_cost_usd_per_run, max_tokens_per_run (a whole "
        "number, 1 or more) and daily_cost_usd (US dollars, 0 or more)",
    }

    @field_validator("budget")
    @classmethod
    def _budget(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _budget_value(value)

    #: fields whose default the schema does not show (not applied when left out)
    undocumented_defaults: ClassVar[tuple[str, ...]] = ("name", "system_prompt")

    @field_validator("tool_selection")
    @classmethod
    def _selection(cls, value: int | str | None) -> int | str | None:
        """ "all", or N from 1 to MAX_TOP_N: a JSON integer, or its ASCII digits (a form's
        text; "²" and "٣" are digits to Python, not to us)."""
        if isinstance(value, str):
            text = value.strip()
            if text == "all":
                return text
            if not (text.isascii() and text.isdecimal() and len(text) <= 3):
                raise ValueError(_SELECTION)
            value = int(text)
        if value is not None and not 1 <= value <= MAX_TOP_N:
            raise ValueError(_SELECTION)
        return value

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """The fields given in ``data`` in model form (null: blank; names stripped), and
        what is wrong, by field (``__all__``: unknown fields)."""
        given = {k: v for k, v in data.items() if k != "updated_at"}
        try:
            body = cls.model_validate(given)
        except ValidationError as exc:
            return {}, cls._errors(exc)
        return {name: body._stored(name) for name in FIELDS if name in body.model_fields_set}, {}

    @classmethod
    def _errors(cls, exc: ValidationError) -> dict[str, str]:
        errors: dict[str, str] = {}
        unknown: list[str] = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "__all__"
            if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
                unknown.append(field)
            elif error["type"] == "missing":
                errors.setdefault(field, "required")
            elif error["type"] == "value_error":
                errors.setdefault(field, str(error.get("ctx", {}).get("error", error["msg"])))
            else:
                errors.setdefault(field, cls.type_errors.get(field, error["msg"]))
        out: dict[str, str] = {}  # in the order people read: unknown, wrong, then missing
        if unknown:
            out["__all__"] = (
                f"unknown fields: {', '.join(sorted(unknown))}; known: {', '.join(FIELDS)}"
            )
        last = [f for f in FIELDS if errors.get(f) == "required"]
        out.update((f, errors[f]) for f in FIELDS if f in errors and f not in last)
        out.update((f, errors[f]) for f in last)
        return out

    def _stored(self, name: str) -> Any:
        value = getattr(self, name)
        if value is None:
            return _BLANK[name]
        if name == "tool_selection":
            return str(value).strip()
        if isinstance(value, str) and name != "system_prompt":
            return value.strip()
        return value

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """What a new or replaced profile has in the fields left out, in model form."""
        return {
            name: copy.deepcopy(_BLANK[name] if field.default is None else field.default)
            for name, field in cls.model_fields.items()
            if name not in ("name", "system_prompt")
        }


class CreateProfile(ProfileFields):
    """A new agent profile: only name and system_prompt are required; the rest default as
    shown. Also what `manage.py agents import` reads for a profile that does not exist."""

    name: str = Field(json_schema_extra={"pattern": "^[-a-zA-Z0-9_]+$"})
    system_prompt: str

    @field_validator("name", "system_prompt")
    @classmethod
    def _not_empty(cls, value: str, info: ValidationInfo) -> str:
        if not (value.strip() if info.field_name == "name" else value):
            raise ValueError("required")
        return value


class ReplaceProfile(ProfileFields):
    """A profile's new content: the fields left out take their defaults; the name, when
    given, must be the profile's own (a profile keeps its name). Also what
    `manage.py agents import` reads for a profile that exists."""

    system_prompt: str


class ChangeProfile(ProfileFields):
    """The fields to change; the others stay as they are."""

    undocumented_defaults: ClassVar[tuple[str, ...]] = tuple(FIELDS)


def request_schema(model: type[Input]) -> dict[str, Any]:
    """The JSON schema of a request body, for the OpenAPI document (without titles)."""
    return _untitled(model.model_json_schema())


def _untitled(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untitled(v) for k, v in value.items() if k != "title"}
    if isinstance(value, list):
        return [_untitled(v) for v in value]
    return value


class StrictInput(Input):
    """A request body whose unknown keys are refused (422 naming them), not ignored."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Self:
        unknown = sorted(str(k) for k in data if k not in cls.model_fields)
        if unknown:
            known = ", ".join(cls.model_fields)
            raise InvalidArguments(f"unknown keys: {', '.join(unknown)}; known: {known}")
        return super().parse(data)


class ForkRun(StrictInput):
    """Fork a run (DESIGN §14): a dry run from the source's conversation at ``at_seq``,
    continued by another profile version or model."""

    at_seq: int | None = Field(
        None, description="the source's event to fork after (inclusive); default its last"
    )
    agent: str | None = Field(None, description="the profile that continues; default the source's")
    version: int | None = Field(None, description="that profile's version; default its newest")
    model: str | None = Field(
        None, description="the model; default the version's, else the installation's AGENTWEB_MODEL"
    )

    refusals: ClassVar[dict[str, tuple[type[ActionError], str]]] = {
        "at_seq": (InvalidArguments, "at_seq must be a whole number"),
        "agent": (InvalidArguments, "agent must be a profile name"),
        "version": (InvalidArguments, "version must be a whole number"),
        "model": (InvalidArguments, "model must be a string"),
    }
