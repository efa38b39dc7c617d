"""The OpenAPI description of profile versions, dry runs and forks (DESIGN §14),
merged into ``openapi.document``."""

from __future__ import annotations

from typing import Any

from agentweb.runs.api_input import request_schema
from agentweb.runs.strict_input import ForkRun
from agentweb.runs.suites import CreateSuite, StartExperiment
from agentweb.tickets.api_input import request_schema as inline_schema


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(text: str) -> dict[str, Any]:
    return _json(_ref("Error"), text)


#: What a run's JSON says of its version, mode and fork (added to the Run schema).
RUN_PROPERTIES: dict[str, Any] = {
    "agent_version": {
        "type": ["integer", "null"],
        "description": "The version of its agent profile the run ran (GET "
        "/api/agents/{name}/versions/{n})",
    },
    "mode": {
        "type": "string",
        "enum": ["normal", "dry"],
        "description": "dry: medium/high-risk tools were not executed; each such call is a "
        'tool_call_finished with "dry": true and the result {"dry_run": true, "would_call", '
        '"arguments"}',
    },
    "forked_from": {
        "type": ["object", "null"],
        "description": "The run (and the seq in it, inclusive) this dry run continues from",
        "properties": {"run": {"type": "integer"}, "at_seq": {"type": "integer"}},
    },
}

SCHEMAS: dict[str, Any] = {
    "AgentVersion": {
        "type": "object",
        "required": ["version", "saved_at", "saved_by", "profile"],
        "properties": {
            "version": {"type": "integer", "minimum": 1},
            "saved_at": {"type": "string", "format": "date-time"},
            "saved_by": {
                "type": ["string", "null"],
                "description": "null: the installation (seeding, agents import)",
            },
            "restored_from": {
                "type": ["integer", "null"],
                "description": "the version this save restored, if it was a restore",
            },
            "profile": _ref("Agent"),
        },
    }
}

_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_N = {"name": "n", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}

PATHS: dict[str, Any] = {
    "/api/agents/{name}/versions": {
        "parameters": [_NAME],
        "get": {
            "summary": "Every saved version of an agent profile, newest first (read-only)",
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "required": ["versions"],
                        "properties": {
                            "versions": {"type": "array", "items": _ref("AgentVersion")}
                        },
                    }
                ),
                "401": _error("Not authenticated"),
                "404": _error("No such agent profile"),
            },
        },
    },
    "/api/agents/{name}/versions/{n}": {
        "parameters": [_NAME, _N],
        "get": {
            "summary": "One version of an agent profile (versions never change: PUT, PATCH "
            "and DELETE answer 405)",
            "responses": {
                "200": _json(_ref("AgentVersion")),
                "401": _error("Not authenticated"),
                "404": _error("No such agent profile or version"),
            },
        },
    },
    "/api/runs/{id}/fork": {
        "post": {
            "summary": "Fork a run: a dry run from its conversation at at_seq (inclusive), "
            "continued by another profile version or model; a call equal to one the source "
            'made gets its recorded result ("recorded": true)',
            "parameters": [
                {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
            ],
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": request_schema(ForkRun)}},
            },
            "responses": {
                "201": _json(_ref("Run"), "Created: the fork (mode dry, forked_from)"),
                "400": _error("Bad request"),
                "401": _error("Not authenticated"),
                "403": _error("May not start runs"),
                "404": _error("No such run (or not one this user may see)"),
                "422": _error(
                    "Unknown keys, an at_seq past the end, an unknown agent, version or model"
                ),
            },
        }
    },
    "/api/suites": {
        "get": {
            "summary": "Suites (operators and admins)",
            "responses": {
                "200": _json({"type": "object", "properties": {"suites": {"type": "array"}}}),
                "401": _error("Not authenticated"),
                "403": _error("Not an operator or admin"),
            },
        },
        "post": {
            "summary": "Create a suite: cases from a task, a ticket or a past run, each with "
            "what is expected (422 names an unknown key or a wrong case)",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": inline_schema(CreateSuite)}},
            },
            "responses": {
                "201": _json({"type": "object"}, "Created"),
                "400": _error("Bad request"),
                "401": _error("Not authenticated"),
                "403": _error("Not an operator or admin"),
                "422": _error(
                    "An unknown key, a case without one of task/ticket/run, an "
                    "unknown ticket, run or validator"
                ),
            },
        },
    },
    "/api/suites/{name}/experiments": {
        "parameters": [_NAME],
        "post": {
            "summary": "Run every case of the suite as a dry run of a profile version, in "
            "parallel on the workers",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": request_schema(StartExperiment)}},
            },
            "responses": {
                "201": _json(_ref("Experiment"), "Created"),
                "400": _error("Bad request"),
                "401": _error("Not authenticated"),
                "403": _error("Not an operator or admin"),
                "404": _error("No such suite or version"),
                "422": _error("Unknown keys, an unknown agent or model"),
            },
        },
    },
    "/api/experiments/{id}": {
        "get": {
            "summary": "An experiment and each case's result",
            "parameters": [
                {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}
            ],
            "responses": {
                "200": _json(_ref("Experiment")),
                "401": _error("Not authenticated"),
                "403": _error("Not an operator or admin"),
                "404": _error("No such experiment"),
            },
        }
    },
}

SCHEMAS["Experiment"] = {
    "type": "object",
    "required": ["id", "suite", "agent", "version", "status", "cases", "passed", "total"],
    "properties": {
        "id": {"type": "integer"},
        "suite": {"type": "string"},
        "agent": {"type": "string"},
        "version": {"type": "integer"},
        "model": {"type": "string"},
        "status": {"type": "string", "enum": ["queued", "running", "done", "failed"]},
        "cases": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "name",
                    "run",
                    "passed",
                    "failures",
                    "tokens",
                    "cost_usd",
                    "duration_ms",
                ],
                "properties": {
                    "name": {"type": "string"},
                    "run": {"type": ["integer", "null"]},
                    "passed": {"type": ["boolean", "null"], "description": "null while it runs"},
                    "failures": {"type": "array", "items": {"type": "string"}},
                    "tokens": {"type": "integer"},
                    "cost_usd": {"type": ["number", "null"]},
                    "duration_ms": {"type": ["number", "null"]},
                },
            },
        },
        "passed": {"type": "integer"},
        "total": {"type": "integer"},
    },
}
