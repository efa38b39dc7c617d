"""What ``/hooks/tickets/<source>`` accepts, by source kind: agentweb's generic shape and
Zendesk's trigger payload. Each parses into an ``Incoming`` for ``actions`` (or refuses
with ``InvalidTicket`` naming the field: ``ticket.subject``, ``message.body`` ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from agentweb.tickets.actions import Incoming
from agentweb.tickets.api_input import (
    MAX_BODY,
    ExternalId,
    Fields,
    InvalidTicket,
    MessageBody,
    Queue,
    Requester,
    Subject,
    Tags,
    TicketInput,
    _tags,
)

TicketStatus = Literal["open", "pending", "solved", "closed"]
# Zendesk's statuses (as its placeholders render them, any case) -> ours
ZENDESK_STATUS = {
    "new": "open",
    "open": "open",
    "pending": "pending",
    "hold": "pending",
    "on-hold": "pending",
    "solved": "solved",
    "closed": "closed",
}


@dataclass
class HookEvent:
    delivery_id: str
    event: str
    incoming: Incoming
    update: bool


def _an_id(value: str | int) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    if len(text) > 500:
        raise ValueError("is longer than 500 characters")
    return text


# --- generic ------------------------------------------------------------------------------


class HookTicket(TicketInput):
    external_id: ExternalId
    subject: Subject = ""
    requester: Requester = Field(default_factory=Requester)
    status: TicketStatus | None = None
    queue: Queue | None = None
    tags: Tags | None = None
    fields: Fields | None = None

    @field_validator("external_id")
    @classmethod
    def _required(cls, value: str) -> str:
        return _an_id(value)


class HookMessage(TicketInput):
    external_id: str | int = ""
    body: MessageBody
    author: Annotated[str, Field(max_length=320)] = ""

    @field_validator("body")
    @classmethod
    def _body(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class GenericHook(TicketInput):
    """``{"event", "delivery_id", "ticket": {...}, "message"?: {...}}``"""

    event: Literal["ticket.created", "ticket.updated", "message.created"]
    delivery_id: Annotated[str, Field(min_length=1, max_length=200)]
    ticket: HookTicket
    message: HookMessage | None = None

    type_errors = {
        "event": 'must be "ticket.created", "ticket.updated" or "message.created"',
        "delivery_id": "must be a string",
        "ticket": "must be an object",
        "message": "must be an object",
    }

    @model_validator(mode="after")
    def _what_each_event_needs(self) -> Self:
        if self.event == "ticket.created" and not self.ticket.subject:
            raise InvalidTicket("ticket.subject is required for ticket.created", "ticket.subject")
        if self.event == "message.created" and self.message is None:
            raise InvalidTicket("message is required for message.created", "message")
        return self

    @classmethod
    def event_of(cls, source: str, data: dict[str, Any]) -> HookEvent:
        hook = cls.parse(data)
        t, m = hook.ticket, hook.message
        incoming = Incoming(
            source=source,
            external_id=t.external_id,
            subject=t.subject,
            requester_email=t.requester.email,
            requester_name=t.requester.name,
            status=t.status,
            queue=t.queue,
            tags=t.tags,
            fields=t.fields,
        )
        if m is not None:
            incoming.body = m.body
            incoming.author = m.author.strip()
            incoming.message_external_id = str(m.external_id).strip()[:998]
        return HookEvent(
            hook.delivery_id.strip(), hook.event, incoming, hook.event != "ticket.created"
        )


# --- Zendesk -------------------------------------------------------------------------------


class ZendeskRequester(TicketInput):
    email: Annotated[str, Field(max_length=320)] = ""
    name: Annotated[str, Field(max_length=200)] = ""


class ZendeskTicket(TicketInput):
    """What the trigger's JSON body carries (its placeholders render as strings)."""

    id: str | int
    subject: Annotated[str, Field(max_length=2000)] = ""
    title: Annotated[str, Field(max_length=2000)] = ""
    description: Annotated[str, Field(max_length=MAX_BODY)] = ""
    latest_comment: Annotated[str, Field(max_length=MAX_BODY)] = ""
    requester: ZendeskRequester = Field(default_factory=ZendeskRequester)
    tags: str | list[str] | None = None
    status: str | None = None
    group: Annotated[str, Field(max_length=100)] | None = None
    fields: Fields | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | int) -> str:
        return _an_id(value)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        return _tags(value.split() if isinstance(value, str) else value)

    @field_validator("status")
    @classmethod
    def _status(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        ours = ZENDESK_STATUS.get(value.strip().lower())
        if ours is None:
            raise ValueError(f"unknown Zendesk status {value.strip()[:40]!r}")
        return ours


class ZendeskHook(TicketInput):
    """``{"ticket": {"id", "subject", "description", "requester": {"email", "name"},
    "tags", "status", "latest_comment", "group"?, "fields"?}}``"""

    ticket: ZendeskTicket

    type_errors = {"ticket": "must be an object", "id": "must be a string or a number"}

    @classmethod
    def event_of(cls, source: str, data: dict[str, Any], delivery_id: str) -> HookEvent:
        t = cls.parse(data).ticket
        subject = (t.subject or t.title).strip()[:500]
        incoming = Incoming(
            source=source,
            external_id=str(t.id),
            subject=subject,
            requester_email=t.requester.email.strip(),
            requester_name=t.requester.name.strip(),
            status=t.status,
            queue=t.group.strip() if t.group is not None else None,
            tags=t.tags,  # the validator made it a list
            fields=t.fields,
            body=t.latest_comment or t.description,
            author=t.requester.name.strip() or t.requester.email.strip(),
        )
        return HookEvent(delivery_id, "zendesk", incoming, update=True)
