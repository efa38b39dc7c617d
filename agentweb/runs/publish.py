"""Wake-up calls to browsers over the channel layer, sent only after commit.

A message only says "run N has events up to seq S"; consumers read the events from the
database, so a lost or repeated message costs nothing but a refetch.

Sending happens on one background thread per process with its own event loop, so a
worker's step never waits for Redis and the channel layer keeps its connections
between sends (``async_to_sync`` would build a new event loop, and new connections,
for every message).
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.dispatch import receiver

log = logging.getLogger(__name__)

RUNS_GROUP = "runs"
APPROVALS_GROUP = "approvals"


def run_group(run_id: int) -> str:
    return f"run-{run_id}"


def session_group(session_key: str) -> str:
    """Every socket of one browser session (a digest: the key itself stays out of Redis)."""
    return "session-" + hashlib.sha256(session_key.encode()).hexdigest()[:40]


class _Sender:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] | None = None
        self._pending = 0
        self._failed = 0  # sends failed since the last one that worked
        self._idle = threading.Condition()

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # new process: new thread
                self._pid = os.getpid()
                ready = threading.Event()
                self._loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._run,
                    args=(self._loop, ready),
                    name="channel-publisher",
                    daemon=True,
                )
                thread.start()
                ready.wait()
            return self._loop

    def _run(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        self._queue = asyncio.Queue()
        ready.set()
        loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        assert self._queue is not None
        # An instance of its own: the process-wide layer may also serve consumers on other
        # event loops, and its locks belong to the loop that used them first.
        layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        while True:
            item = await self._queue.get()
            if item is None:
                return
            group, message = item
            try:
                if layer is not None:
                    await layer.group_send(group, message)
                if self._failed:
                    log.warning("channel layer back after %d failed sends", self._failed)
                    self._failed = 0
            except Exception as exc:  # the record is in PostgreSQL; followers refetch
                # One line per outage, not a traceback per event.
                if not self._failed:
                    log.warning("channel layer send to %s failed (%s); counting", group, exc)
                self._failed += 1
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def submit(self, group: str, message: dict[str, Any]) -> None:
        loop = self._start()
        with self._idle:
            self._pending += 1
        assert self._queue is not None
        loop.call_soon_threadsafe(self._queue.put_nowait, (group, message))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far was handed to the channel layer."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending <= 0, timeout)


_sender = _Sender()
atexit.register(_sender.flush, 2.0)


def send_now(group: str, message: dict[str, Any]) -> None:
    """Queue a message for the channel layer; returns at once."""
    _sender.submit(group, message)


def flush(timeout: float = 5.0) -> bool:
    return _sender.flush(timeout)


def send_on_commit(group: str, message: dict[str, Any]) -> None:
    transaction.on_commit(lambda: send_now(group, message))


def run_changed_on_commit(run_id: int, seq: int, status: str | None) -> None:
    """After commit: the run's followers fetch events after their last seq; lists update
    (unless ``status`` is None: the status did not change)."""
    send_on_commit(run_group(run_id), {"type": "run.event", "run": run_id, "seq": seq})
    if status is not None:
        send_on_commit(RUNS_GROUP, {"type": "run.status", "run": run_id, "status": status})


def run_status_on_commit(run_id: int, status: str) -> None:
    """After commit: the run lists hear of the run's new status."""
    send_on_commit(RUNS_GROUP, {"type": "run.status", "run": run_id, "status": status})


def tree_changed_on_commit(
    run_id: int, parent_id: int | None, root_id: int | None, types: Iterable[str]
) -> None:
    """After commit: the pages of the runs whose tree shows the run re-render it (its
    parent and top run; and the run itself when a subtask started or ended)."""
    groups = [i for i in (parent_id, root_id) if i is not None]
    if any(t.startswith("subtask_") for t in types):
        groups.append(run_id)
    for group_run in dict.fromkeys(groups):
        send_on_commit(run_group(group_run), {"type": "run.tree", "run": group_run})


def run_status_now(run_id: int, status: str) -> None:
    """Lists update: the run's status changed outside a transaction (a worker claimed it)."""
    send_now(RUNS_GROUP, {"type": "run.status", "run": run_id, "status": status})


def approvals_changed_on_commit() -> None:
    send_on_commit(APPROVALS_GROUP, {"type": "approvals.changed"})


@receiver(user_logged_out, dispatch_uid="agentweb-close-sockets-on-logout")
def close_sockets_on_logout(sender: Any, request: Any = None, **kwargs: Any) -> None:
    """Log-out ends the session's live sockets too (they close with 4401)."""
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        send_now(session_group(key), {"type": "session.ended"})
