"""What an MCP server is here: how to reach it (``ServerConfig``), its tools as it lists
them (``ToolInfo``), and a call's answer without the SDK's types (``CallOutcome``).
``mcptools`` makes runtime tools of them; ``mcpclient`` makes the connections."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_TIMEOUT",
    "SEPARATOR",
    "CallOutcome",
    "ServerConfig",
    "ServerStatus",
    "ToolInfo",
    "listener",
    "server_name_problem",
    "set_listener",
]

SEPARATOR = "__"
#: A server's name: letters, digits, "-" and single "_" (never "__", the separator).
SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*(?:_[A-Za-z0-9-]+)*")
MAX_SERVER_NAME = 30
DEFAULT_TIMEOUT = 60.0
MIN_CONNECT_TIMEOUT = 20.0


def server_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a server, or None."""
    if not name:
        return "a server needs a name"
    if len(name) > MAX_SERVER_NAME:
        return f"at most {MAX_SERVER_NAME} characters"
    if not SERVER_NAME.fullmatch(name):
        return 'letters, digits, "-" and single "_", starting with a letter (no "__")'
    return None


@dataclass(frozen=True)
class ServerConfig:
    """How to reach one server: a command (stdio) or a URL (Streamable HTTP). ``env`` and
    ``headers`` may hold secrets: they are never shown (not in ``repr`` either)."""

    name: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = DEFAULT_TIMEOUT  # seconds a call may take
    cwd: str | None = None
    #: seconds for starting and connecting (a server's start-up often takes a few):
    #: None, the timeout but at least ``MIN_CONNECT_TIMEOUT``
    connect_timeout: float | None = None

    def __post_init__(self) -> None:
        problem = server_name_problem(self.name)
        if problem:
            raise ValueError(f"MCP server name {self.name!r}: {problem}")
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r}: give a command or a URL, not both")

    @classmethod
    def stdio(cls, name: str, command: str, env: Mapping[str, str] | None = None, **kw: Any) -> Any:
        """A server started as ``command`` (split like a shell would, without one)."""
        parts = tuple(shlex.split(command))
        if not parts:
            raise ValueError(f"MCP server {name!r}: the command is empty")
        return cls(name, command=parts, env=dict(env or {}), **kw)

    @property
    def connect_within(self) -> float:
        if self.connect_timeout is not None:
            return self.connect_timeout
        return max(self.timeout, MIN_CONNECT_TIMEOUT)

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    @property
    def target(self) -> str:
        """What it runs or where it is, without secrets."""
        return shlex.join(self.command) if self.command else self.url

    def fingerprint(self) -> str:
        """Changes whenever anything about reaching the server changes."""
        blob = json.dumps(
            [self.name, self.command, dict(self.env), self.url, dict(self.headers), self.cwd],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ToolInfo:
    """One tool as the server lists it (what is kept of it between processes)."""

    name: str
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    description: str = ""
    title: str = ""
    annotations: dict[str, Any] = field(default_factory=dict)  # readOnlyHint, destructiveHint …

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolInfo:
        return cls(
            name=str(data["name"]),
            input_schema=dict(data.get("input_schema") or {"type": "object"}),
            description=str(data.get("description") or ""),
            title=str(data.get("title") or ""),
            annotations=dict(data.get("annotations") or {}),
        )


@dataclass(slots=True)
class CallOutcome:
    """A server's answer to a call, without the SDK's types."""

    is_error: bool = False
    texts: list[str] = field(default_factory=list)
    structured: Any = None
    images: list[tuple[bytes, str]] = field(default_factory=list)  # (data, media type)
    notes: list[str] = field(default_factory=list)  # content that could not be used as is


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What this process knows of a server after a connection, a listing or a failure."""

    state: str  # "ready" | "failed"
    error: str = ""
    tools: tuple[ToolInfo, ...] | None = None  # None: not listed this time


Listener = Callable[[ServerConfig, ServerStatus], None]
_listener: Listener | None = None


def set_listener(to: Listener | None) -> None:
    """Be told of every server's status changes in this process (tool lists, failures),
    in a thread of the tool pool (the listener may use its database there)."""
    global _listener
    _listener = to


def listener() -> Listener | None:
    return _listener
