"""MCP servers this installation connects to (DESIGN §13): how to reach each, and what
the last contact said (its state, error and tool list, which every process reads)."""

from __future__ import annotations

import shlex
from typing import Any

from django.conf import settings
from django.db import models

from agentweb.runtime.mcpserver import ServerConfig, ToolInfo
from agentweb.runtime.mcptools import tool_name


def without_password(url: str) -> str:
    """``url`` with any user and password in it replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if sep and "@" in authority:
        return f"{scheme}://***@{authority.rpartition('@')[2]}{slash}{path}"
    return url


class McpServer(models.Model):
    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a command)"
        HTTP = "http", "Streamable HTTP (a URL)"

    class State(models.TextChoices):
        NEW = "new", "not contacted yet"
        READY = "ready", "ready"
        FAILED = "failed", "failed"

    name = models.CharField(max_length=30, unique=True)
    transport = models.CharField(max_length=5, choices=Transport.choices)
    command = models.TextField(blank=True, help_text="stdio: the command and its arguments")
    url = models.CharField(max_length=2000, blank=True, help_text="Streamable HTTP: the URL")
    # Secrets: shown to nobody (API, admin and commands show their names only).
    env = models.JSONField(default=dict, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=6, choices=State.choices, default=State.NEW)
    error = models.TextField(blank=True)
    tools = models.JSONField(default=list, blank=True)  # [ToolInfo.to_json(), ...]
    checked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    def config(self) -> ServerConfig:
        """How the runtime reaches it (the timeout is the installation's)."""
        timeout = float(settings.AGENTWEB_MCP_TIMEOUT_SECONDS)
        if self.transport == self.Transport.STDIO:
            return ServerConfig(
                self.name,
                command=tuple(shlex.split(self.command)),
                env={str(k): str(v) for k, v in (self.env or {}).items()},
                timeout=timeout,
            )
        return ServerConfig(
            self.name,
            url=self.url,
            headers={str(k): str(v) for k, v in (self.headers or {}).items()},
            timeout=timeout,
        )

    def tool_infos(self) -> list[ToolInfo]:
        out = []
        for data in self.tools or []:
            try:
                out.append(ToolInfo.from_json(data))
            except (KeyError, TypeError, ValueError):
                continue
        return out

    def as_json(self) -> dict[str, Any]:
        """The API's shape; env and header values are never in it (their names are)."""
        out: dict[str, Any] = {"name": self.name, "transport": self.transport}
        if self.transport == self.Transport.STDIO:
            out["command"] = self.command
            out["env"] = sorted(self.env or {})
        else:
            out["url"] = without_password(self.url)
            out["headers"] = sorted(self.headers or {})
        out.update(
            state=self.state,
            tools=[tool_name(self.name, t.name) for t in self.tool_infos()],
            error=self.error or None,
            checked_at=self.checked_at.isoformat() if self.checked_at else None,
        )
        return out
