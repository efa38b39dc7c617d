"""What each JSON API endpoint accepts: one pydantic model per request body.

``api.py`` parses a body with ``Model.parse(data)``; ``openapi.py`` describes the same
body with ``request_schema(Model)``, so the document cannot drift from the parser. A
refused field raises the action error and message its model names in ``refusals``.

Agent profiles are read with ``Model.read(data)`` (by ``profiles.save_profile``, for the
API and ``agents import``): the fields given, and every refusal by field (422 names each).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import DEFAULT_REF_TEMPLATE, GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from agentweb.middleware import MAX_INT, NUL
from agentweb.runs.errors import ActionError, InvalidArguments
from agentweb.runs.profile_rules import FIELDS, MAX_TOP_N

# --- what the edge refuses in every request, in JSON Schema terms ----------------------

#: Text we take: no NUL (``middleware.bad_chars`` refuses it in every string and key of a
#: body, query and path); unpaired surrogates, refused too, are no Unicode characters, so
#: no pattern can name them (regex engines of JSON Schema work on characters).
BAD_CHARS = NUL
TEXT = f"^[^{BAD_CHARS}]*$"
#: The characters ``str.strip()`` removes (``str.isspace``), spelled out, since regex
#: engines disagree on ``\s`` (tests/runs/test_api_schema.py checks the list).
WHITESPACE = (
    "\\t\\n\\u000b\\u000c\\r\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a"
    "\\u2028\\u2029\\u202f\\u205f\\u3000"
)
#: Text with something besides white space (and nothing ``TEXT`` refuses).
NON_BLANK = f"^[{WHITESPACE}]*[^{WHITESPACE}{BAD_CHARS}][^{BAD_CHARS}]*$"
#: White space or nothing.
BLANK = f"^[{WHITESPACE}]*$"
#: Path parameters: an id (digits: the URL takes no sign), or a name.
PATH_ID = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
PATH_TEXT = {"type": "string", "pattern": TEXT}
#: Any JSON value a request may carry (``components.schemas.Json``).
JSON_REF = "#/components/schemas/Json"


def json_value_schema() -> dict[str, Any]:
    """``Json``: every JSON value the edge takes; free-form fields and ignored keys."""
    return {
        "description": "Any JSON value we can store: Unicode text without NUL characters (no "
        "unpaired surrogates; also in keys), numbers within 64-bit integers (a whole "
        "number is an integer: 2.0 is 2), at most 64 levels deep",
        "anyOf": [
            {"type": "string", "pattern": TEXT},
            {"type": "number", "minimum": -MAX_INT - 1, "maximum": MAX_INT},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": {"$ref": JSON_REF}},
            {
                "type": "object",
                "propertyNames": {"pattern": TEXT},
                "additionalProperties": {"$ref": JSON_REF},
            },
        ],
    }


class ApiJsonSchema(GenerateJsonSchema):
    """The JSON schema of what a model accepts, with what the edge refuses before any
    model sees it: strings and keys with NUL or unpaired surrogates (a string with its own
    pattern must exclude them itself: a test checks every pattern of the document),
    numbers past 64-bit integers; ``Any`` and keys a model ignores are ``Json``."""

    _ANY = "x-agentweb-json"  # a stand-in while pydantic resolves its own references

    def generate(self, schema: core_schema.CoreSchema, mode: Any = "validation") -> Any:
        return _own_patterns(_json_refs(super().generate(schema, mode=mode), self._ANY))

    def str_schema(self, schema: core_schema.StringSchema) -> JsonSchemaValue:
        out = super().str_schema(schema)
        out.setdefault("pattern", TEXT)
        return out

    def int_schema(self, schema: core_schema.IntSchema) -> JsonSchemaValue:
        out = super().int_schema(schema)
        if "exclusiveMinimum" not in out:
            out["minimum"] = max(out.get("minimum", -MAX_INT - 1), -MAX_INT - 1)
        if "exclusiveMaximum" not in out:
            out["maximum"] = min(out.get("maximum", MAX_INT), MAX_INT)
        return out

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        out = super().float_schema(schema)
        if "exclusiveMinimum" not in out:
            out["minimum"] = max(out.get("minimum", -MAX_INT - 1), -MAX_INT - 1)
        if "exclusiveMaximum" not in out:
            out["maximum"] = min(out.get("maximum", MAX_INT), MAX_INT)
        return out

    def any_schema(self, schema: core_schema.AnySchema) -> JsonSchemaValue:
        return {self._ANY: True}

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        out = super().dict_schema(schema)
        keys = out.get("patternProperties", {})
        if list(keys) == [TEXT]:  # the keys' pattern: as propertyNames
            out["additionalProperties"] = out.pop("patternProperties")[TEXT]
        out.setdefault("propertyNames", {"pattern": TEXT})
        out.setdefault("additionalProperties", {self._ANY: True})
        return out

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        out = super().model_schema(schema)
        if schema["cls"].model_config.get("extra") != "forbid":  # ignored keys: any JSON
            out.setdefault("propertyNames", {"pattern": TEXT})
            out.setdefault("additionalProperties", {self._ANY: True})
        return out


def _own_patterns(value: Any) -> Any:
    """A nullable field's own pattern (``str | None`` with ``pattern`` beside ``anyOf``)
    goes to its string, in place of the generic NUL-free one."""
    if isinstance(value, dict):
        out = {k: _own_patterns(v) for k, v in value.items()}
        strings = [
            b for b in out.get("anyOf", []) if isinstance(b, dict) and b.get("type") == "string"
        ]
        if "pattern" in out and len(strings) == 1:
            strings[0]["pattern"] = out.pop("pattern")
        return out
    if isinstance(value, list):
        return [_own_patterns(v) for v in value]
    return value


def _json_refs(value: Any, stand_in: str) -> Any:
    if isinstance(value, dict):
        if stand_in in value:
            return {"$ref": JSON_REF}
        return {k: _json_refs(v, stand_in) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_refs(v, stand_in) for v in value]
    return value


class Documented(BaseModel):
    """A model whose JSON schema says what the edge refuses too (``ApiJsonSchema``)."""

    @classmethod
    def model_json_schema(
        cls,
        by_alias: bool | None = None,
        ref_template: str = DEFAULT_REF_TEMPLATE,
        schema_generator: type[GenerateJsonSchema] = ApiJsonSchema,
        mode: Literal["validation", "serialization"] = "validation",
        **kwargs: Any,
    ) -> dict[str, Any]:
        return super().model_json_schema(by_alias, ref_template, schema_generator, mode, **kwargs)


class OneOf:
    """``Annotated[str | None, OneOf(values, "status")]``: a string that must be one of
    ``values``; the check and the schema's enum come from the same tuple."""

    def __init__(self, values: Iterable[str], what: str) -> None:
        self.values, self.what = tuple(values), what

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> JsonSchemaValue:
        return {"type": "string", "enum": list(self.values)}

    def _check(self, value: str | None) -> str | None:
        if value is not None and value not in self.values:
            known = ", ".join(self.values)
            raise ValueError(f"unknown {self.what} {value[:40]!r}; one of {known}")
        return value


class Query(Documented):
    """Query parameters: text from the URL (numbers in digits), the last of a repeated
    one; an empty one is the same as none (``allowEmptyValue`` in the document)."""

    model_config = ConfigDict(extra="ignore")

    @classmethod
    def parse(cls, params: Mapping[str, Any]) -> Self:
        data = {name: params.get(name) for name in cls.model_fields}
        try:
            return cls.model_validate({k: v for k, v in data.items() if v not in (None, "")})
        except ValidationError as exc:
            error = exc.errors()[0]
            name = str(error["loc"][0]) if error["loc"] else "query"
            ctx = error.get("ctx", {})
            if error["type"] == "value_error":
                message = str(ctx.get("error", error["msg"]))
            elif error["type"] == "greater_than_equal":
                message = f"{name} must be at least {ctx['ge']}"
                if ctx["ge"] == 0:
                    message = f"{name} must not be negative"
            elif error["type"] == "less_than_equal":
                message = f"{name} must be at most {ctx['le']}"
            elif error["type"].startswith("int_"):
                message = f"{name} must be an integer, got {str(error['input'])[:40]!r}"
            else:
                message = f"{name}: {error['msg']}"
            raise ActionError(message) from None


def query_parameters(model: type[Query]) -> list[dict[str, Any]]:
    """The document's ``parameters`` of a query model: one per field, each optional."""
    schema = _untitled(model.model_json_schema())
    out = []
    for name, spec in schema["properties"].items():
        spec = dict(spec)
        param = {"name": name, "in": "query", "required": False, "allowEmptyValue": True}
        if "description" in spec:
            param["description"] = spec.pop("description")
        if spec.get("default") in (None, ""):  # left out (or empty): no filter, today
            spec.pop("default", None)
        out.append({**param, "schema": spec})
    return out


def request_body(model: type[BaseModel], schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The document's ``requestBody`` of a body model (``schema``: its schema, if not
    ``request_schema(model)``); required unless ``{}``, which a request without a body
    is, is a valid body."""
    try:
        model.model_validate({})
        empty_ok = True
    except ValidationError:
        empty_ok = False
    schema = request_schema(model) if schema is None else schema  # type: ignore[arg-type]
    return {"required": not empty_ok, "content": {"application/json": {"schema": schema}}}


class Input(Documented):
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


def _start_schema(schema: dict[str, Any]) -> None:
    schema["anyOf"] = [  # as _task_or_ticket: a task with words in it, or a ticket
        {"required": ["task"], "properties": {"task": {"pattern": NON_BLANK}}},
        {"required": ["ticket"], "properties": {"ticket": {"type": "integer"}}},
    ]
    known = INSTALLATION.get()
    if known is not None:  # the profiles there are ("" or null: the default one)
        agent = schema["properties"]["agent"]["anyOf"][0]
        agent["enum"] = ["", *sorted(known["profiles"])]
        agent.pop("pattern", None)


class StartRun(Input):
    """Start a run on a task, or on a ticket alone (its subject and body become the task)."""

    model_config = ConfigDict(
        strict=True,
        extra="ignore",
        json_schema_extra=_start_schema,
    )

    task: str = Field("", examples=["Where is order A1001?"])
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

_SPACE = f"[{WHITESPACE}]*"
ToolSelection = Annotated[
    int | str | None,
    WithJsonSchema(
        {
            "oneOf": [
                {"const": "all"},
                {"type": "integer", "minimum": 1, "maximum": MAX_TOP_N},
                {"type": "null"},
                {  # as a form sends it: "all" or the digits (_selection reads them)
                    "type": "string",
                    "not": {"const": "all"},
                    "pattern": f"^{_SPACE}(all|0{{0,2}}[1-9]|0?[1-9][0-9]|100){_SPACE}$",
                },
            ],
            "description": '"all": offer every allowed tool; N: the N most relevant and '
            "search_tools",
        }
    ),
]


class Budget(Documented):
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


#: What the installation's document states beyond the models' own rules (the tools, the
#: profiles, the model providers it has: ``profile_rules.installation``), set by
#: ``openapi.document`` while it builds the document for someone signed in.
INSTALLATION: ContextVar[Mapping[str, Any] | None] = ContextVar("installation", default=None)

MAX_PROMPT_ITERATIONS = 200  # max_iterations: 1 to this (profile_rules says the same)
MIN_CONTEXT_TOKENS = 1000
MAX_CONTEXT_TOKENS = 2**31 - 1  # the column's own limit (PositiveIntegerField)
#: A profile's model: blank (the installation's), demo, or provider:model; the server's
#: ``agents.model_problem`` reads it after strip() as this says.
_W = f"[{WHITESPACE}]*"
_MODEL_NAME = f"{_W}[^{WHITESPACE}{BAD_CHARS}][^{BAD_CHARS}]*"


def model_pattern(
    providers: Iterable[str] = ("openai", "anthropic"), demo: bool = True, blank: bool = True
) -> str:
    kinds = [f"{_W}demo{_W}"] if demo else []
    kinds += [f"{_W}{kind}:{_MODEL_NAME}" for kind in providers]
    return f"^({'|'.join([*([_W] if blank else []), *kinds])})$"


#: A threshold's argument names: identifiers without "__" (``profile_rules.policy_errors``)
ARGUMENT_NAME = "^(_|(_?[A-Za-z]|_[0-9])[A-Za-z0-9]*(_[A-Za-z0-9]+)*_?)$"


_NUMBER = {"type": "number", "minimum": -MAX_INT - 1, "maximum": MAX_INT}


def _policy_schema(
    never: bool, escalation: bool, arguments: Iterable[str] | None
) -> dict[str, Any]:
    """One tool's approval policy, as ``profile_rules.policy_errors`` reads it (a rule's
    argument and sum_per: one of the tool's ``arguments``, if it names them)."""
    threshold = ["argument", "at_least", "sum_per"]
    name: dict[str, Any] = {"type": "string", "pattern": ARGUMENT_NAME}
    if arguments is not None:
        name = {
            "type": "string",
            "enum": sorted(a for a in arguments if re.search(ARGUMENT_NAME, a)),
        }
    properties: dict[str, Any] = {
        "argument": name,
        "at_least": _NUMBER,
        "sum_per": {"anyOf": [name, {"type": "null"}]},
        "approvers": {"type": "integer", "minimum": 1, "maximum": 10},
    }
    people = ["approvers"]
    if escalation:
        properties["escalate_after_minutes"] = {
            "anyOf": [{**_NUMBER, "exclusiveMinimum": 0}, {"type": "null"}]
        }
        people.append("escalate_after_minutes")
    names = ["always", "default", *(["never"] if never else [])]
    return {
        "anyOf": [
            {"type": "string", "enum": names},
            {"type": "null"},
            {
                "type": "object",
                "properties": properties,
                "additionalProperties": False,
                "anyOf": [
                    *([{"required": ["argument", "at_least"]}] if name.get("enum", [1]) else []),
                    {
                        "anyOf": [{"required": [key]} for key in people],
                        "not": {"anyOf": [{"required": [key]} for key in threshold]},
                    },
                ],
            },
        ]
    }


def _profile_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    for name in getattr(model, "undocumented_defaults", ()):
        schema["properties"][name].pop("default", None)
    properties = schema["properties"]
    for name in ("model",):  # a nullable field's pattern belongs to its string
        if "pattern" in properties[name]:
            properties[name]["anyOf"][0]["pattern"] = properties[name].pop("pattern")
    if model.__name__ in ("ReplaceProfile", "ChangeProfile"):
        properties["name"]["readOnly"] = True
        properties["name"]["description"] = "the profile's own (a profile keeps its name)"
    known = INSTALLATION.get()
    if known is None:
        return
    # The names this installation has: a generated client offers them, a fuzzer uses them.
    tools = sorted(known["tools"])
    properties["allowed_tools"]["anyOf"][0]["items"] = {
        "type": "string",
        "enum": sorted({*tools, *known["wildcards"]}),
    }
    properties["risk_overrides"]["anyOf"][0] = {
        "type": "object",
        "propertyNames": {"enum": tools},
        "additionalProperties": {"type": "string", "enum": ["low", "medium", "high"]},
    }
    properties["approval_policies"]["anyOf"][0] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            tool: _policy_schema(
                known["unapproved_high_risk"] or known["risk"].get(tool) != "high",
                known["escalation"],
                known["arguments"].get(tool),
            )
            for tool in tools
        },
    }
    # "never" (no approval) only for a tool this profile does not make high-risk
    never = [
        tool
        for tool in tools
        if not known["unapproved_high_risk"] and known["risk"].get(tool) != "high"
    ]
    if never:
        schema["not"] = {
            "anyOf": [
                {
                    "required": ["approval_policies", "risk_overrides"],
                    "properties": {
                        "approval_policies": {
                            "required": [t],
                            "properties": {t: {"const": "never"}},
                        },
                        "risk_overrides": {"required": [t], "properties": {t: {"const": "high"}}},
                    },
                }
                for t in never
            ]
        }
    properties["delegates"]["anyOf"][0]["items"] = {
        "type": "string",
        "enum": sorted(known["profiles"]),
    }
    properties["validator"]["anyOf"][0] = {"type": "string", "enum": ["", *known["validators"]]}
    properties["model"]["anyOf"][0]["pattern"] = model_pattern(known["providers"])


_PROMPT = "You answer questions about orders for {{user}}."
_LIMITS = {"string_too_long", "greater_than_equal", "less_than_equal"}
NAME = "^[-a-zA-Z0-9_]+$"  # a slug, as AgentProfile.name's validator


class ProfileFields(Input):
    """The fields of an agent profile, as GET shows them. The endpoints read them with
    CreateProfile (POST), ReplaceProfile (PUT) and ChangeProfile (PATCH); updated_at, which
    GET shows, is ignored, other unknown fields are refused."""

    model_config = ConfigDict(strict=True, extra="forbid", json_schema_extra=_profile_schema)

    name: str = Field("", max_length=60, json_schema_extra={"pattern": NAME})
    description: str | None = Field("", max_length=300)
    system_prompt: str = Field("", examples=[_PROMPT], json_schema_extra={"pattern": NON_BLANK})
    model: str | None = Field(
        None,
        max_length=120,
        description="null or blank: the installation's AGENTWEB_MODEL; demo, "
        "openai:<model> or anthropic:<model> (a provider whose key is set)",
        json_schema_extra={"pattern": model_pattern()},
    )
    allowed_tools: list[str] | None = Field(
        [],
        description="tool names; an MCP server's as <server>__<tool>, or all of them as "
        "<server>__*; empty: every tool of the AGENTWEB_TOOLS modules and no MCP server's",
    )
    tool_selection: ToolSelection = "all"
    validator: str | None = Field(
        None, max_length=200, description="dotted path of a completion validator"
    )
    approval_policies: dict[str, Any] | None = Field(
        {}, description='per tool: "always", "never" or {"argument", "at_least", "sum_per"}'
    )
    risk_overrides: dict[str, Any] | None = Field(
        {}, description='per tool: "low", "medium" or "high"'
    )
    max_iterations: int = Field(20, ge=1, le=MAX_PROMPT_ITERATIONS)
    context_budget_tokens: int = Field(16000, ge=MIN_CONTEXT_TOKENS, le=MAX_CONTEXT_TOKENS)
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

    #: field -> what is wrong when its value is out of the documented bounds
    limit_errors: ClassVar[dict[str, str]] = {
        "name": "at most 60 characters",
        "description": "at most 300 characters",
        "model": "at most 120 characters",
        "validator": "at most 200 characters",
        "max_iterations": f"must be from 1 to {MAX_PROMPT_ITERATIONS}",
        "context_budget_tokens": f"must be from {MIN_CONTEXT_TOKENS} to {MAX_CONTEXT_TOKENS}",
    }

    @field_validator("system_prompt")
    @classmethod
    def _prompt(cls, value: str) -> str:
        if not value.strip():  # NON_BLANK says the same: str.strip() removes WHITESPACE
            raise ValueError("required")
        return value

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
            elif error["type"] in _LIMITS and field in cls.limit_errors:
                errors.setdefault(field, cls.limit_errors[field])
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

    name: str = Field(max_length=60, json_schema_extra={"pattern": NAME})
    system_prompt: str = Field(examples=[_PROMPT], json_schema_extra={"pattern": NON_BLANK})

    @field_validator("name")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("required")
        return value


class ReplaceProfile(ProfileFields):
    """A profile's new content: the fields left out take their defaults; the name, when
    given, must be the profile's own (a profile keeps its name). Also what
    `manage.py agents import` reads for a profile that exists."""

    system_prompt: str = Field(examples=[_PROMPT], json_schema_extra={"pattern": NON_BLANK})


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
