"""Celery tasks and worker hooks of the MCP servers: interfaces, like views."""

from __future__ import annotations

import logging
import threading

from celery import shared_task, signals
from django.db import connection

from agentweb.mcpservers import actions
from agentweb.mcpservers.models import McpServer
from agentweb.mcpservers.source import SOURCE

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def refresh_server(name: str) -> str | None:
    """Contact a server (just added) from this worker: list its tools, record the result."""
    server = McpServer.objects.filter(name=name).first()
    if server is None:
        return None
    return actions.refresh(server).state


@signals.worker_ready.connect
def _contact_servers_on_start(**_: object) -> None:
    """A worker that starts reads every server's tool list again (in the background: a
    slow server does not hold up the worker), and from then on reads new servers' lists
    itself as soon as it sees them."""
    SOURCE.contact = actions.refresh
    threading.Thread(target=_refresh_all, name="mcp-start", daemon=True).start()


def _refresh_all() -> None:
    try:
        for server in McpServer.objects.all():
            try:
                actions.refresh(server)
            except Exception:
                log.warning("MCP server %s: contact at start failed", server.name, exc_info=True)
    except Exception:  # the database is away: the first calls contact the servers
        log.warning("MCP servers could not be read at start", exc_info=True)
    finally:
        connection.close()  # this thread runs nothing else that would close it
