"""The OpenAPI 3.1 document of the JSON API, served at /api/openapi.json."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from agentweb.budgets import openapi as budgets_doc
from agentweb.mcpservers import openapi as mcp_doc
from agentweb.middleware import MAX_INT
from agentweb.runs import openapi_versions as versions_doc
from agentweb.runs.api import _token_user
from agentweb.runs.api_input import (
    INSTALLATION,
    PATH_ID,
    PATH_TEXT,
    TEXT,
    ChangeProfile,
    CreateProfile,
    DecideApproval,
    Input,
    ReplaceProfile,
    StartRun,
    json_value_schema,
    query_parameters,
    request_body,
    request_schema,
)
from agentweb.runs.api_query import ListApprovals, ListEvents, ListRuns
from agentweb.runs.models import Approval, Run
from agentweb.runs.profile_rules import installation
from agentweb.tickets import openapi as tickets_doc


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _stored(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _stored(v)
            for k, v in value.items()
            if not (k == "pattern" and v != TEXT) and k not in ("anyOf", "oneOf", "allOf")
        } | {k: [_stored(v) for v in value[k]] for k in ("anyOf", "oneOf") if k in value}
    if isinstance(value, list):
        return [_stored(v) for v in value]
    return value


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERRORS = {
    code: _json(_ref("Error"), text)
    for code, text in {
        "400": "Bad request",
        "401": "Not authenticated",
        "403": "Not allowed",
        "404": "Not found",
        "409": "Conflict",
        "422": "Invalid tool arguments or profile fields",
    }.items()
}


def _errors(*codes: str) -> dict[str, Any]:
    return {c: _ERRORS[c] for c in codes}


def _body(model: type[Input]) -> dict[str, Any]:
    """A request body: the JSON schema of the pydantic model its endpoint parses it with."""
    return request_body(model)


def _agent() -> dict[str, Any]:
    """A profile as GET shows it: the fields a new one takes, and when it last changed;
    what is stored may predate a rule a new one must follow (a blank prompt, a model
    whose key is gone), so the rules beyond the types and NUL-free text are left out."""
    schema = _stored(request_schema(CreateProfile))
    schema.pop("additionalProperties", None)
    schema["description"] = "An agent profile; only name and system_prompt are required"
    schema["properties"]["updated_at"] = {
        "type": ["string", "null"],
        "format": "date-time",
        "readOnly": True,
    }
    return schema


_ID = {"name": "id", "in": "path", "required": True, "schema": PATH_ID}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {},
                },
            }
        },
    },
    "Run": {
        "type": "object",
        "required": [
            "id",
            "status",
            "task",
            "agent",
            "final_answer",
            "created_by",
            "created_at",
            "finished_at",
            "usage",
        ],
        "properties": {
            "id": {"type": "integer"},
            "status": {"type": "string", "enum": list(Run.Status.values)},
            "task": {"type": "string"},
            "agent": {"type": "string"},
            "model": {"type": "string"},
            "ticket": {"type": ["integer", "null"]},
            "final_answer": {"type": ["string", "null"]},
            "failure_reason": {"type": ["string", "null"]},
            "created_by": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
            "started_at": {"type": ["string", "null"], "format": "date-time"},
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
            "last_seq": {"type": "integer"},
            "usage": {
                "type": "object",
                "properties": {
                    "input_tokens": {"type": "integer"},
                    "output_tokens": {"type": "integer"},
                    "model_calls": {"type": "integer"},
                    "cost_usd": {"type": "number"},
                    "children": {
                        "type": "object",
                        "description": "The share of the totals rolled up from child runs",
                    },
                },
            },
            "parent_id": {"type": ["integer", "null"]},
            "children": {"type": "array", "items": {"type": "integer"}},
            "trace_id": {
                "type": "string",
                "pattern": "^[0-9a-f]{32}$",
                "description": "The run's OpenTelemetry trace id (children share it)",
            },
            "actions": {
                "type": "array",
                "description": "Every medium/high-risk call of the run with its fate",
                "items": {
                    "type": "object",
                    "properties": {
                        "tool": {"type": "string"},
                        "call_id": {"type": "string"},
                        "status": {
                            "type": "string",
                            "enum": [
                                "pending",
                                "executed",
                                "rejected",
                                "failed",
                                "expired",
                                "cancelled",
                            ],
                        },
                        "approved_by": {
                            "type": ["string", "null"],
                            "enum": ["person", "policy", None],
                        },
                    },
                },
            },
        },
    },
    "Event": {
        "type": "object",
        "required": ["seq", "type", "at", "data"],
        "properties": {
            "seq": {"type": "integer", "minimum": 1},
            "type": {
                "type": "string",
                "enum": [
                    "run_started",
                    "model_called",
                    "tool_call_started",
                    "tool_call_finished",
                    "approval_requested",
                    "approval_decided",
                    "context_compacted",
                    "run_finished",
                    "run_failed",
                    "run_cancelled",
                    "subtask_started",
                    "subtask_finished",
                    "completion_objected",
                    "approval_given",
                ],
            },
            "at": {"type": "string", "format": "date-time"},
            "data": {"type": "object"},
        },
    },
    "Approval": {
        "type": "object",
        "required": [
            "id",
            "run",
            "call_id",
            "tool",
            "arguments",
            "risk",
            "status",
            "requested_at",
            "expires_at",
        ],
        "properties": {
            "id": {"type": "integer"},
            "run": {"type": "integer"},
            "top_run": {
                "type": "integer",
                "description": "The top-level run of the run's tree (the run itself when it "
                "is not a subtask)",
            },
            "call_id": {"type": "string"},
            "tool": {"type": "string"},
            "arguments": {"type": "object"},
            "risk": {"type": "string", "enum": ["low", "medium", "high"]},
            "reason": {"type": "string"},
            "status": {"type": "string", "enum": list(Approval.Status.values)},
            "requested_at": {"type": "string", "format": "date-time"},
            "expires_at": {"type": "string", "format": "date-time"},
            "decided_by": {"type": ["string", "null"]},
            "comment": {"type": "string"},
            "edited_arguments": {"type": ["object", "null"]},
            "approvals_needed": {
                "type": "integer",
                "description": "Distinct people who must approve before the call runs "
                '(a policy\'s "approvers"; 1 by default)',
            },
            "approvals_given": {"type": "integer", "description": "People who approved so far"},
            "notifications": {
                "type": "array",
                "description": "What reached whom: each mail, Slack post and webhook about it",
                "items": {
                    "type": "object",
                    "required": ["channel", "to", "state", "error"],
                    "properties": {
                        "channel": {"type": "string", "enum": ["email", "slack", "webhook"]},
                        "to": {"type": "string"},
                        "state": {"type": "string", "enum": ["queued", "sent", "failed"]},
                        "error": {"type": ["string", "null"]},
                        "attempts": {"type": "integer"},
                        "topic": {"type": "string"},
                        "delivery_id": {"type": "string"},
                        "sent_at": {"type": ["string", "null"], "format": "date-time"},
                    },
                },
            },
        },
    },
}

SCHEMAS["Run"]["properties"].update(versions_doc.RUN_PROPERTIES)


def paths() -> dict[str, Any]:
    """The runs' paths (made for each request: the profile bodies name the installation's
    tools and profiles for someone signed in)."""
    return {
        "/api/runs": {
            "get": {
                "summary": "List runs (newest first)",
                "parameters": query_parameters(ListRuns),
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"runs": {"type": "array", "items": _ref("Run")}},
                        }
                    ),
                    **_errors("400", "401"),
                },
            },
            "post": {
                "summary": "Start a run",
                "requestBody": _body(StartRun),
                "responses": {
                    "201": _json(_ref("Run"), "Created"),
                    # 409 ticket_busy: the ticket has an active run, named by "active_run"
                    **_errors("400", "401", "403", "404", "409"),
                },
            },
        },
        "/api/runs/{id}": {
            "get": {
                "summary": "One run",
                "parameters": [_ID],
                "responses": {"200": _json(_ref("Run")), **_errors("401", "404")},
            }
        },
        "/api/runs/{id}/events": {
            "get": {
                "summary": "Events of a run after a sequence number, in order",
                "parameters": [
                    _ID,
                    *query_parameters(ListEvents),
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"events": {"type": "array", "items": _ref("Event")}},
                        }
                    ),
                    **_errors("400", "401", "404"),
                },
            }
        },
        "/api/runs/{id}/cancel": {
            "post": {
                "summary": "Cancel a queued, running or waiting run",
                "parameters": [_ID],
                "responses": {"200": _json(_ref("Run")), **_errors("401", "403", "404", "409")},
            }
        },
        "/api/agents": {
            "get": {
                "summary": "Agent profiles (anyone signed in)",
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"agents": {"type": "array", "items": _ref("Agent")}},
                        }
                    ),
                    **_errors("401"),
                },
            },
            "post": {
                "summary": "Create an agent profile (admins); 422 names each invalid field",
                "requestBody": _body(CreateProfile),
                "responses": {
                    "201": _json(_ref("Agent"), "Created"),
                    **_errors("400", "401", "403", "409", "422"),
                },
            },
        },
        "/api/agents/{name}": {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": PATH_TEXT}],
            "get": {
                "summary": "One agent profile",
                "responses": {"200": _json(_ref("Agent")), **_errors("401", "404")},
            },
            "put": {
                "summary": "Replace an agent profile (admins); fields left out take their defaults",
                "requestBody": _body(ReplaceProfile),
                "responses": {
                    "200": _json(_ref("Agent")),
                    **_errors("400", "401", "403", "404", "422"),
                },
            },
            "patch": {
                "summary": "Change the given fields of an agent profile (admins); 409 when "
                "the change does not fit the fields it leaves as they are",
                "requestBody": _body(ChangeProfile),
                "responses": {
                    "200": _json(_ref("Agent")),
                    **_errors("400", "401", "403", "404", "409", "422"),
                },
            },
            "delete": {
                "summary": "Delete an agent profile no run uses (admins)",
                "responses": {
                    "204": {"description": "Deleted"},
                    **_errors("401", "403", "404", "409"),
                },
            },
        },
        "/api/approvals": {
            "get": {
                "summary": "Approval requests, oldest first",
                "parameters": query_parameters(ListApprovals),
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "approvals": {"type": "array", "items": _ref("Approval")}
                            },
                        }
                    ),
                    **_errors("400", "401"),
                },
            }
        },
        "/api/approvals/{id}/decide": {
            "post": {
                "summary": "Approve (optionally with edited arguments) or reject a pending call",
                "parameters": [_ID],
                "requestBody": _body(DecideApproval),
                "responses": {
                    "200": _json(_ref("Approval")),
                    **_errors("400", "401", "403", "404", "409", "422"),
                },
            }
        },
    }


#: What any operation may answer, whatever it does: the edge refuses a request (400: NUL
#: characters, a bad query parameter), a caller is unknown (401) or has no role (403);
#: one with a body may also get 413 (over 1,000,000 bytes) and 415 (not JSON); any may
#: get 503 while the database is down.
_ANY_OPERATION = ("400", "401", "403", "503")
_WITH_BODY = ("413", "415")
_WORDS = {
    "400": "Bad request",
    "401": "Not authenticated",
    "403": "Not allowed",
    "404": "Not found",
    "413": "The body is larger than 1,000,000 bytes",
    "415": "The body is not JSON",
    "503": "The database is unavailable; try again (Retry-After)",
}
_METHODS = ("get", "put", "post", "delete", "patch")


def _edge_rules(parameters: list[dict[str, Any]]) -> None:
    """What the edge refuses in any path or query parameter, for those whose module did
    not say it: text with a NUL character, integers past 64 bits."""
    for parameter in parameters:
        schema = parameter.get("schema", {})
        if schema.get("type") == "string" and "pattern" not in schema and "enum" not in schema:
            schema["pattern"] = TEXT
        if schema.get("type") == "integer":
            schema.setdefault("minimum", -MAX_INT - 1)
            schema.setdefault("maximum", MAX_INT)


def _every_error_listed(doc_paths: dict[str, Any]) -> dict[str, Any]:
    """Each operation lists the errors any operation can answer (with the Error schema),
    besides its own; a path with a parameter also 404 (no such thing)."""
    for item in doc_paths.values():
        _edge_rules(item.get("parameters", []))
        for method in _METHODS:
            if method in item:
                _edge_rules(item[method].get("parameters", []))
    for path, item in doc_paths.items():
        for method, operation in item.items():
            if method not in _METHODS:
                continue
            codes = [*_ANY_OPERATION, *(_WITH_BODY if "requestBody" in operation else ())]
            if "{" in path:
                codes.append("404")
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(code, _json(_ref("Error"), _WORDS[code]))
    return doc_paths


def document(installation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The document; with ``installation`` (``profile_rules.installation()``) the bodies
    also name this installation's tools, profiles and model providers."""
    token = INSTALLATION.set(installation)
    try:
        doc_paths = {
            **paths(),
            **tickets_doc.PATHS,
            **mcp_doc.PATHS,
            **budgets_doc.PATHS,
            **versions_doc.PATHS,
        }
    finally:
        INSTALLATION.reset(token)
    agent = _agent()
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentweb API", "version": "1"},
        "components": {
            "schemas": {
                **SCHEMAS,
                "Agent": agent,
                "Json": json_value_schema(),
                **tickets_doc.SCHEMAS,
                **mcp_doc.SCHEMAS,
                **budgets_doc.SCHEMAS,
                **versions_doc.SCHEMAS,
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": _every_error_listed(copy.deepcopy(doc_paths)),
    }


@require_GET  # other methods: 405 with Allow: GET
def openapi_json(request: HttpRequest) -> JsonResponse:
    """Anyone may read it; for someone signed in (bearer or session) it also names the
    installation's tools, profiles and providers, which are not for strangers."""
    user = _token_user(request) if "Authorization" in request.headers else request.user
    signed_in = user is not None and user.is_authenticated and user.has_perm("runs.view_run")
    return JsonResponse(document(installation() if signed_in else None))
