"""Wake-up calls to browsers over the channel layer, sent only after commit.

A message only says "run N has events up to seq S"; consumers read the events from the
database, so a lost or repeated message costs nothing but a refetch.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

RUNS_GROUP = "runs"
APPROVALS_GROUP = "approvals"


def run_group(run_id: int) -> str:
    return f"run-{run_id}"


def send_now(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # the record is in PostgreSQL; a lost wake-up is recovered by refetch
        log.warning("channel layer send to %s failed", group, exc_info=True)


def send_on_commit(group: str, message: dict[str, Any]) -> None:
    transaction.on_commit(lambda: send_now(group, message))


def run_changed_on_commit(run_id: int, seq: int, status: str) -> None:
    """After commit: the run's followers fetch events after their last seq; lists update."""
    send_on_commit(run_group(run_id), {"type": "run.event", "run": run_id, "seq": seq})
    send_on_commit(RUNS_GROUP, {"type": "run.status", "run": run_id, "status": status})


def approvals_changed_on_commit() -> None:
    send_on_commit(APPROVALS_GROUP, {"type": "approvals.changed"})
