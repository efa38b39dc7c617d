"""MCP servers in the application: the runs tests' people and scripted model, the real
servers of ``tests.fakes.mcp_servers``, and no connection left open after a test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentweb.mcpservers import actions
from agentweb.mcpservers.models import McpServer
from agentweb.mcpservers.source import SOURCE
from agentweb.runtime import mcpclient
from agentweb.runtime.mcpserver import ServerStatus
from tests.fakes import mcp_servers
from tests.runs.conftest import enqueued, people, sample_registry, scripted

__all__ = ["enqueued", "people", "sample_registry", "scripted"]


@pytest.fixture(autouse=True)
def _mcp_clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """No refresh task leaves the test process; every connection closed afterwards."""
    asked: list[str] = []
    monkeypatch.setattr(actions, "ask_for_contact", asked.append)
    SOURCE.invalidate()
    yield asked
    mcpclient.close_all()
    SOURCE.invalidate()


@pytest.fixture
def asked(_mcp_clean: list[str]) -> list[str]:
    """The servers a worker was asked to contact."""
    return _mcp_clean


def faulty(name: str = "faulty", env: dict[str, str] | None = None) -> McpServer:
    """Our faulty server, added and contacted from this process (its tools are known)."""
    server = actions.do_add_server(name=name, command=mcp_servers.faulty_command(), env=env or {})
    return actions.refresh(server)


def with_tools(name: str, tools: list[dict[str, Any]]) -> McpServer:
    """A server whose tool list a contact stored (no process is started)."""
    from agentweb.runtime.mcpserver import ToolInfo

    server = actions.do_add_server(name=name, url=f"https://{name}.example/mcp")
    infos = tuple(ToolInfo.from_json(t) for t in tools)
    actions.do_record_status(server.config(), ServerStatus("ready", "", infos))
    server.refresh_from_db()
    return server
