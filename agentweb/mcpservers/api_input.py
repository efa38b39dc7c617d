"""What ``POST /api/mcp-servers`` accepts (the OpenAPI document is made from it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import ConfigDict, Field, ValidationError

from agentweb.mcpservers.actions import (
    _ENV_NAME,
    _HEADER_NAME,
    MAX_PAIRS,
    RESERVED_HEADERS,
    ServerInvalid,
)
from agentweb.middleware import NUL
from agentweb.runs.api_input import BLANK, TEXT, WHITESPACE, Input
from agentweb.runtime.mcpserver import MAX_SERVER_NAME, SERVER_NAME

_W = f"[{WHITESPACE}]*"
#: What shlex.split() reads (``actions.check_server``): quotes closed, no escape at the end.
_TOKEN = f"[^'\"\\\\{NUL}]|\\\\[^{NUL}]|'[^'{NUL}]*'|\"([^\"\\\\{NUL}]|\\\\[^{NUL}])*\""
_FIRST = f"[^'\"\\\\{WHITESPACE}{NUL}]|\\\\[^{NUL}]|'[^'{NUL}]*'|\"([^\"\\\\{NUL}]|\\\\[^{NUL}])*\""
COMMAND = f"^{_W}({_FIRST})({_TOKEN})*$"
#: An http(s) URL with a host, without spaces or control characters (``check_server``).
URL = f"^[hH][tT][tT][pP][sS]?://[^/ \\t\\r\\n{NUL}][^ \\t\\r\\n{NUL}]*$"
_RESERVED = "|".join(
    "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in name)  # a-z and "-"
    for name in sorted(RESERVED_HEADERS)
)


def _server_schema(schema: dict[str, Any]) -> None:
    """A server entry as ``actions.check_server`` reads it: a command (stdio, with env) or
    a url (Streamable HTTP, with headers), the other blank."""
    properties = schema["properties"]
    properties["name"].update(pattern=f"^{SERVER_NAME.pattern}$", maxLength=MAX_SERVER_NAME)
    properties["command"] = {**properties["command"], "maxLength": 4000}
    properties["url"] = {**properties["url"], "maxLength": 2000}
    for name in ("command", "url"):
        properties[name].pop("pattern")  # each branch below says which
    properties["env"].update(
        maxProperties=MAX_PAIRS,
        propertyNames={"pattern": f"^{_ENV_NAME.pattern}$"},
        additionalProperties={"type": "string", "maxLength": 8000, "pattern": TEXT},
    )
    properties["headers"].update(
        maxProperties=MAX_PAIRS,
        propertyNames={
            "pattern": f"^{_HEADER_NAME.pattern}$",
            "not": {"pattern": f"^({_RESERVED})$"},
        },
        additionalProperties={
            "type": "string",
            "maxLength": 8000,
            "pattern": f"^[^\\r\\n{NUL}]*$",
        },
    )
    schema["anyOf"] = [
        {
            "required": ["command"],
            "properties": {
                "command": {"pattern": COMMAND},
                "url": {"pattern": BLANK},
                "headers": {"maxProperties": 0},
            },
        },
        {
            "required": ["url"],
            "properties": {
                "url": {"pattern": URL},
                "command": {"pattern": BLANK},
                "env": {"maxProperties": 0},
            },
        },
    ]


class AddServer(Input):
    """An MCP server: a command (stdio) or a url (Streamable HTTP). ``env`` (stdio) and
    ``headers`` (HTTP) may hold secrets: they are stored, never shown again."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra=_server_schema,
    )

    name: str
    command: str = Field(
        "",
        examples=["uvx mcp-server-time"],
        description='stdio: the command and its arguments, "CMD ARGS"',
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="stdio: the server's environment (besides HOME, LOGNAME, PATH, SHELL, "
        "TERM, USER)",
    )
    url: str = Field(
        "",
        examples=["https://mcp.example.com/mcp"],
        description="Streamable HTTP: the server's URL",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Streamable HTTP: headers sent with every request",
    )

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Self:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            errors: dict[str, str] = {}
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else "__all__"
                if err["type"] == "extra_forbidden":
                    message = "unknown field; known: name, command, env, url, headers"
                elif err["type"] == "missing":
                    message = "required"
                elif field in ("env", "headers"):
                    message = "must be an object of strings"
                else:
                    message = "must be a string"
                errors.setdefault(field, message)
            raise ServerInvalid(errors) from None
