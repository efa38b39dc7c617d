"""The MCP servers' tools as this process offers them (a ``ToolSource`` of the registry):
made from the rows (the tool lists a contact stored), made again when a row changed.
A process looks for changes at most every ``POLL_SECONDS``, so a server added while
the stack runs is offered within seconds, without a restart."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

from django.apps import apps
from django.db import transaction
from django.db.models import Count, Max

from agentweb.mcpservers.models import McpServer
from agentweb.runtime import mcptools
from agentweb.runtime.execution import shared_pool
from agentweb.runtime.tools import Tool

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0


class ServerTools:
    """Every MCP server's tools (``<server>__<tool>``), and the servers' names."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tools: tuple[Tool, ...] = ()
        self._families: frozenset[str] = frozenset()
        self._stamp: object = None
        self._due = 0.0
        #: In a worker: how this process reads a new server's tool list itself.
        self.contact: Callable[[McpServer], object] | None = None
        self._asked: set[tuple[str, str]] = set()

    def tools(self) -> Sequence[Tool]:
        self._look()
        return self._tools

    def families(self) -> frozenset[str]:
        self._look()
        return self._families

    def invalidate(self) -> None:
        """Look at the rows on the next question (this process just changed one)."""
        self._due = 0.0

    def _look(self) -> None:
        if time.monotonic() < self._due or not apps.ready:
            return
        if not self._lock.acquire(blocking=False):
            return  # another thread is looking: its answer comes soon enough
        try:
            self._due = time.monotonic() + POLL_SECONDS
            self._rebuild()
        finally:
            self._lock.release()

    def _rebuild(self) -> None:
        try:
            with transaction.atomic():  # a savepoint: a failure spoils no caller's transaction
                stamp = McpServer.objects.aggregate(n=Count("id"), last=Max("updated_at"))
                if stamp == self._stamp:
                    return
                rows = list(McpServer.objects.all())
        except Exception:  # no table yet (before migrate), the database away, async code
            log.debug("MCP servers could not be read; keeping the tools known", exc_info=True)
            return
        tools: list[Tool] = []
        for row in rows:
            try:
                made, _problems = mcptools.make_tools(row.config(), row.tool_infos())
            except ValueError:
                log.warning("MCP server %s: its entry cannot be used", row.name, exc_info=True)
                continue
            tools.extend(made)
        gone = self._families - {r.name for r in rows}
        self._tools, self._families = tuple(tools), frozenset(r.name for r in rows)
        self._stamp = stamp
        for name in gone:
            mcptools.forget(name)
        if self.contact is not None:
            self._contact_new(rows, self.contact)

    def _contact_new(self, rows: list[McpServer], contact: Callable[[McpServer], object]) -> None:
        """Read the tool lists of servers no process has contacted yet (in the tool pool)."""
        for row in rows:
            key = (row.name, row.config().fingerprint())
            if row.state != McpServer.State.NEW or key in self._asked:
                continue
            self._asked.add(key)
            shared_pool().submit(partial(contact, row))


SOURCE = ServerTools()
