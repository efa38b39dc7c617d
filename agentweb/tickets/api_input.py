"""What the tickets' endpoints accept: one pydantic model per request body (the OpenAPI
document is generated from the same models, ``agentweb.tickets.openapi``).

A refused body raises ``InvalidTicket`` (422) naming the first field that is wrong
(``error.field``), as a path into the body: ``requester.email``, ``tags.2``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from agentweb.middleware import MAX_INT
from agentweb.runs.api_input import BAD_CHARS, NON_BLANK, WHITESPACE, Documented, OneOf, Query
from agentweb.runs.errors import ActionError
from agentweb.tickets.actions import SOURCE_NAME
from agentweb.tickets.models import MAX_QUEUE, MAX_SUBJECT, MAX_TAG, Ticket

MAX_BODY = 200_000  # characters of one message
MAX_TAGS = 50
MAX_FIELDS_BYTES = 64_000  # of a ticket's fields, as JSON
MAX_EXTERNAL_ID = 500
MAX_LIST = 500  # tickets in one answer


class InvalidTicket(ActionError):
    """A ticket body we refuse; ``field`` names where (``error.field`` in the answer)."""

    code, status = "invalid_ticket", 422

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def _stripped(limit: int, what: str) -> Any:
    def check(value: str) -> str:
        value = value.strip()
        if len(value) > limit:
            raise ValueError(f"{what} is longer than {limit:,} characters")
        return value

    return AfterValidator(check)


def _tags(value: list[str]) -> list[str]:
    out: list[str] = []
    for tag in value:
        tag = tag.strip()
        if not tag:
            continue
        if len(tag) > MAX_TAG:
            raise ValueError(f"a tag is longer than {MAX_TAG} characters")
        if tag not in out:
            out.append(tag)
    if len(out) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags")
    return out


def _fields(value: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(value, ensure_ascii=False).encode()) > MAX_FIELDS_BYTES:
        raise ValueError(f"fields are larger than {MAX_FIELDS_BYTES:,} bytes as JSON")
    return value


Subject = Annotated[str, Field(max_length=MAX_SUBJECT), _stripped(MAX_SUBJECT, "subject")]
MessageBody = Annotated[str, Field(max_length=MAX_BODY)]
Queue = Annotated[str, Field(max_length=MAX_QUEUE), _stripped(MAX_QUEUE, "queue")]
Tag = Annotated[str, Field(max_length=MAX_TAG)]
Tags = Annotated[
    list[Tag],
    Field(max_length=MAX_TAGS, description="strings; blank ones dropped, each kept once"),
    AfterValidator(_tags),
]
Fields = Annotated[
    dict[str, Any],
    AfterValidator(_fields),
    Field(description="free JSON a source maps in (e.g. customer_id, order_id)"),
]
ExternalId = Annotated[
    str, Field(max_length=MAX_EXTERNAL_ID), _stripped(MAX_EXTERNAL_ID, "external_id")
]


class TicketInput(Documented):
    """A request body: strict JSON types, unknown keys ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")

    #: field -> what a wrong type is called
    type_errors: ClassVar[dict[str, str]] = {}

    @classmethod
    def parse(cls, data: Mapping[str, Any], prefix: str = "") -> Self:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = [str(p) for p in first["loc"]]
            field = ".".join([prefix, *loc] if prefix else loc) or "body"
            if first["type"] == "missing":
                message = f"{field} is required"
            elif first["type"] == "value_error":
                message = f"{field}: {first.get('ctx', {}).get('error', first['msg'])}"
            elif first["type"].endswith("_type") or first["type"] == "literal_error":
                kind = cls.type_errors.get(loc[-1] if loc else "", "")
                if not kind or (len(loc) > 1 and loc[-1].isdigit()):
                    kind = first["msg"].lower()
                message = f"{field}: {kind}"
            else:
                message = f"{field}: {first['msg'].lower()}"
            raise InvalidTicket(message, field) from None


_W = f"[{WHITESPACE}]*"
_ADDRESS = f"[^@<>{WHITESPACE}{BAD_CHARS}]+"


class Requester(TicketInput):
    email: Annotated[str, _stripped(320, "requester.email")] = Field(
        "", max_length=320, json_schema_extra={"pattern": f"^{_W}({_ADDRESS}@{_ADDRESS})?{_W}$"}
    )
    name: Annotated[str, _stripped(200, "requester.name")] = Field("", max_length=200)

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        if value and not re.fullmatch(r"[^@\s<>]+@[^@\s<>]+", value):
            raise ValueError("not an email address")
        return value


_TYPES = {
    "source": "must be a string",
    "external_id": "must be a string",
    "subject": "must be a string",
    "body": "must be a string",
    "requester": "must be an object with email and name",
    "queue": "must be a string",
    "tags": "must be a list of strings",
    "fields": "must be a JSON object",
    "status": f"must be one of {', '.join(Ticket.Status.values)}",
    "direction": 'must be "in" or "out"',
}


class CreateTicket(TicketInput):
    """A new ticket; the same ``(source, external_id)`` again is the existing ticket (200),
    with a new incoming message only when ``body`` differs from its last incoming one."""

    type_errors: ClassVar[dict[str, str]] = _TYPES

    source: str = Field(
        "api",
        description='"api" unless the ticket comes from elsewhere',
        json_schema_extra={"pattern": SOURCE_NAME.pattern},
    )
    external_id: ExternalId = Field("", description="the id at the source; unique per source")
    subject: Subject = Field(
        examples=["Where is my order?"], json_schema_extra={"pattern": NON_BLANK}
    )
    body: MessageBody = ""
    requester: Requester = Field(default_factory=Requester)
    queue: Queue = ""
    tags: Tags = []
    fields: Fields = {}

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if not SOURCE_NAME.fullmatch(value):
            raise ValueError("a source name is 1-64 of a-z, 0-9, _ and -")
        return value

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str) -> str:
        if not value:
            raise ValueError("must not be empty")
        return value


class ChangeTicket(TicketInput):
    """The ticket's fields to change; the others stay. ``fields`` is merged key by key (a
    key set to null goes away)."""

    type_errors: ClassVar[dict[str, str]] = _TYPES

    status: Literal["open", "pending", "solved", "closed"] | None = None
    queue: Queue | None = None
    tags: Tags | None = None
    fields: Fields | None = None


class AddMessage(TicketInput):
    """A message on the ticket: ``in`` (the customer wrote, the default) or ``out`` (a
    reply sent outside agentweb, recorded; agentweb delivers only its own replies)."""

    type_errors: ClassVar[dict[str, str]] = _TYPES

    body: MessageBody = Field(
        examples=["It has not arrived yet."], json_schema_extra={"pattern": NON_BLANK}
    )
    direction: Literal["in", "out"] = "in"
    author: Annotated[str, _stripped(320, "author")] = Field("", max_length=320)

    @field_validator("body")
    @classmethod
    def _body(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class ListTickets(Query):
    """``GET /api/tickets``: every filter optional (``api.filtered`` reads them)."""

    status: Annotated[str | None, OneOf(Ticket.Status.values, "status")] = None
    queue: str = ""
    source: str = ""
    tag: str = ""
    q: str = Field(
        "", description="Words in the subject, the messages or the requester; #id; an external id"
    )
    limit: int = Field(100, ge=0, le=MAX_LIST, description="at most this many")
    offset: int = Field(0, ge=0, le=MAX_INT, description="after skipping this many")


def request_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a request body for the OpenAPI document, nested models inline."""
    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node and node["$ref"].startswith("#/$defs/"):
                return inline(defs[node["$ref"].rsplit("/", 1)[1]])
            return {k: inline(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    out: dict[str, Any] = inline(schema)
    return out
