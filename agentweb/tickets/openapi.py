"""The tickets' part of the OpenAPI document (``agentweb.runs.openapi`` serves the whole):
request bodies generated from the models that parse them (``api_input``)."""

from __future__ import annotations

from typing import Any

from agentweb.runs.api_input import PATH_ID, query_parameters, request_body
from agentweb.tickets.api_input import (
    AddMessage,
    ChangeTicket,
    CreateTicket,
    ListTickets,
    request_schema,
)
from agentweb.tickets.models import Ticket


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_TEXT = {
    "400": ("Error", "Bad request (not a JSON object, a bad query parameter)"),
    "401": ("Error", "Not authenticated"),
    "403": ("Error", "Not allowed (creating and changing tickets: operators and admins)"),
    "404": ("Error", "No such ticket"),
    "413": ("Error", "The body is larger than 1,000,000 bytes"),
    "422": ("FieldError", "A field of the body is refused; error.field names it"),
}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: _json(_ref(_TEXT[c][0]), _TEXT[c][1]) for c in codes}


def _body(model: Any) -> dict[str, Any]:
    return request_body(model, request_schema(model))


_ID = {"name": "id", "in": "path", "required": True, "schema": PATH_ID}
_STRING = {"type": "string"}

MESSAGE: dict[str, Any] = {
    "type": "object",
    "required": ["id", "direction", "author", "body", "at", "external_id", "attachments"],
    "properties": {
        "id": {"type": "integer"},
        "direction": {"type": "string", "enum": ["in", "out"]},
        "author": _STRING,
        "body": {"type": "string", "description": "The new text (quoted history left out)"},
        "at": {"type": "string", "format": "date-time"},
        "external_id": {"type": ["string", "null"]},
        "attachments": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": _STRING, "size": {"type": "integer"}},
            },
        },
        "delivery": {
            "type": "object",
            "description": "Outgoing messages: how delivery to the customer goes",
            "properties": {
                "state": {"type": "string", "enum": ["queued", "sent", "failed"]},
                "reason": {"type": "string"},
                "attempts": {"type": "integer"},
            },
        },
    },
}

TICKET = {
    "type": "object",
    "required": [
        "id",
        "source",
        "external_id",
        "subject",
        "body",
        "customer",
        "requester",
        "status",
        "queue",
        "tags",
        "fields",
        "messages",
        "created_at",
        "updated_at",
        "active_run",
    ],
    "properties": {
        "id": {"type": "integer"},
        "source": {"type": "string", "description": '"api", "email", "demo" or a source name'},
        "external_id": {"type": ["string", "null"]},
        "subject": _STRING,
        "body": {"type": "string", "description": "The first incoming message's text"},
        "customer": {
            "type": "string",
            "description": "fields.customer_id, else the requester's email address",
        },
        "customer_name": _STRING,
        "requester": {"type": "object", "properties": {"email": _STRING, "name": _STRING}},
        "status": {"type": "string", "enum": list(Ticket.Status.values)},
        "queue": _STRING,
        "tags": {"type": "array", "items": _STRING},
        "fields": {"type": "object"},
        "messages": {"type": "array", "items": _ref("TicketMessage")},
        "created_at": {"type": "string", "format": "date-time"},
        "updated_at": {"type": "string", "format": "date-time"},
        "active_run": {"type": ["integer", "null"]},
    },
}

FIELD_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "field"],
            "properties": {
                "code": _STRING,
                "message": _STRING,
                "field": {"type": "string", "description": "Path into the body: requester.email"},
            },
        }
    },
}

MESSAGE_ON_TICKET = {
    **MESSAGE,
    "properties": {**MESSAGE["properties"], "ticket": {"type": "integer"}},
}

SCHEMAS: dict[str, Any] = {"Ticket": TICKET, "TicketMessage": MESSAGE, "FieldError": FIELD_ERROR}

_LIST_PARAMS = query_parameters(ListTickets)

PATHS: dict[str, Any] = {
    "/api/tickets": {
        "get": {
            "summary": "Tickets of every source, most recently active first",
            "parameters": _LIST_PARAMS,
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "properties": {"tickets": {"type": "array", "items": _ref("Ticket")}},
                    }
                ),
                **_errors("400", "401", "403"),
            },
        },
        "post": {
            "summary": "Create a ticket; the same (source, external_id) again is that ticket",
            "requestBody": _body(CreateTicket),
            "responses": {
                "201": _json(_ref("Ticket"), "Created"),
                "200": _json(_ref("Ticket"), "It existed (a new message if the body differs)"),
                **_errors("400", "401", "403", "413", "422"),
            },
        },
    },
    "/api/tickets/{id}": {
        "parameters": [_ID],
        "get": {
            "summary": "One ticket with its thread",
            "responses": {"200": _json(_ref("Ticket")), **_errors("400", "401", "403", "404")},
        },
        "patch": {
            "summary": "Change status, queue, tags or fields (merged; a null removes a key)",
            "requestBody": _body(ChangeTicket),
            "responses": {
                "200": _json(_ref("Ticket")),
                **_errors("400", "401", "403", "404", "413", "422"),
            },
        },
    },
    "/api/tickets/{id}/messages": {
        "parameters": [_ID],
        "post": {
            "summary": "Add a message to the thread",
            "requestBody": _body(AddMessage),
            "responses": {
                "201": _json(MESSAGE_ON_TICKET, "Created"),
                "200": _json(_ref("TicketMessage"), "The same text as the last incoming message"),
                **_errors("400", "401", "403", "404", "413", "422"),
            },
        },
    },
}
