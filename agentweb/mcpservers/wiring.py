"""What the MCP servers app plugs into the others once Django is ready (``apps.py``):
the servers' tools join the registry of every process, and what a contact finds is
recorded on the server's row. Imported by ``McpServersConfig.ready`` only: it imports
models."""

from __future__ import annotations

from agentweb.mcpservers.actions import do_record_status
from agentweb.mcpservers.source import SOURCE
from agentweb.runs.agents import tool_sources
from agentweb.runtime.mcpserver import set_listener


def install() -> None:
    tool_sources.add(SOURCE)
    set_listener(do_record_status)
