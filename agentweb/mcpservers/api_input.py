"""What ``POST /api/mcp-servers`` accepts (the OpenAPI document is made from it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import ConfigDict, Field, ValidationError

from agentweb.mcpservers.actions import ServerInvalid
from agentweb.runs.api_input import Input


class AddServer(Input):
    """An MCP server: a command (stdio) or a url (Streamable HTTP). ``env`` (stdio) and
    ``headers`` (HTTP) may hold secrets: they are stored, never shown again."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={"anyOf": [{"required": ["command"]}, {"required": ["url"]}]},
    )

    name: str = Field(
        json_schema_extra={"pattern": "^[A-Za-z][A-Za-z0-9-]*(_[A-Za-z0-9-]+)*$", "maxLength": 30}
    )
    command: str = Field("", description='stdio: the command and its arguments, "CMD ARGS"')
    env: dict[str, str] = Field(
        default_factory=dict,
        description="stdio: the server's environment (besides HOME, LOGNAME, PATH, SHELL, "
        "TERM, USER)",
    )
    url: str = Field("", description="Streamable HTTP: the server's URL")
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
