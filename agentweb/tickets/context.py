"""What the loaded domains show beside a ticket (``ticket_context(tickets)`` of each tool
module in ``AGENTWEB_TOOLS`` that has one): sections of plain text, escaped by the page."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agentweb.runs.toolset import tool_modules
from agentweb.tickets.models import Ticket

log = logging.getLogger(__name__)


def domain_context(tickets: Sequence[Ticket]) -> dict[int, list[dict[str, Any]]]:
    merged: dict[int, list[dict[str, Any]]] = {}
    if not tickets:
        return merged
    for module in tool_modules():
        panel = getattr(module, "ticket_context", None)
        if not callable(panel):
            continue
        try:
            found = panel(tickets)
        except Exception:  # a domain's panel never breaks the ticket pages
            log.exception("ticket_context of %s failed", module.__name__)
            continue
        for ticket_id, sections in (found or {}).items():
            merged.setdefault(ticket_id, []).extend(sections)
    return merged
