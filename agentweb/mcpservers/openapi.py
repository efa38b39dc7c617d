"""``/api/mcp-servers`` in the OpenAPI document (added to it by this app at start)."""

from __future__ import annotations

from typing import Any

from agentweb.mcpservers.api_input import AddServer
from agentweb.mcpservers.models import McpServer
from agentweb.runs.api_input import PATH_TEXT, request_body


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = {"$ref": "#/components/schemas/Error"}
_WORDS = {
    "400": "Bad request",
    "401": "Not authenticated",
    "403": "Not an admin",
    "404": "No such server",
    "409": "A server by that name exists",
    "422": "Invalid fields (details names each)",
}


def _errors(*codes: str) -> dict[str, Any]:
    return {code: _json(_ERROR, _WORDS[code]) for code in codes}


SCHEMAS: dict[str, Any] = {
    "McpServer": {
        "type": "object",
        "required": ["name", "transport", "state", "tools", "error"],
        "properties": {
            "name": {"type": "string"},
            "transport": {"type": "string", "enum": list(McpServer.Transport.values)},
            "command": {"type": "string", "description": "stdio servers"},
            "url": {"type": "string", "description": "HTTP servers (user and password hidden)"},
            "env": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the names of its environment variables (never the values)",
            },
            "headers": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the names of its headers (never the values)",
            },
            "state": {"type": "string", "enum": list(McpServer.State.values)},
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "its tools as profiles name them: <server>__<tool>",
            },
            "error": {"type": ["string", "null"], "description": "why the last contact failed"},
            "checked_at": {"type": ["string", "null"], "format": "date-time"},
        },
    }
}

_NAME = {"name": "name", "in": "path", "required": True, "schema": PATH_TEXT}

PATHS: dict[str, Any] = {
    "/api/mcp-servers": {
        "get": {
            "summary": "MCP servers with their state and tools (admins)",
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "properties": {
                            "servers": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/McpServer"},
                            }
                        },
                    }
                ),
                **_errors("401", "403"),
            },
        },
        "post": {
            "summary": "Add an MCP server (admins); workers contact it within seconds",
            "requestBody": request_body(AddServer),
            "responses": {
                "201": _json({"$ref": "#/components/schemas/McpServer"}, "Added"),
                **_errors("400", "401", "403", "409", "422"),
            },
        },
    },
    "/api/mcp-servers/{name}": {
        "parameters": [_NAME],
        "get": {
            "summary": "One MCP server (admins)",
            "responses": {
                "200": _json({"$ref": "#/components/schemas/McpServer"}),
                **_errors("401", "403", "404"),
            },
        },
        "delete": {
            "summary": "Remove an MCP server (admins); its tools are offered no more",
            "responses": {"204": {"description": "Removed"}, **_errors("401", "403", "404")},
        },
    },
}
