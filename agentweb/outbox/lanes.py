"""Where attempts run in a worker: a few threads per lane (one SMTP server, one webhook
host), none of them Celery's.

A Celery task only drops the delivery's id into its lane and returns, so a mail server
that hangs until the timeout holds up its own lane's threads, never a run's step and
never another channel's deliveries. Nothing here is the record: a lane's queue lives in
memory, and an id lost with its process is picked up again by beat's sweep (the row is
still queued in PostgreSQL).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from celery import current_task

log = logging.getLogger(__name__)
_local = threading.local()

#: Attempts running at once per lane and process.
THREADS_PER_LANE = 4


class _Lane:
    def __init__(self, name: str, work: Callable[[int], None]) -> None:
        self.name = name
        self.work = work
        self.ids: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def submit(self, delivery_pk: int) -> None:
        self.ids.put(delivery_pk)
        with self.lock:
            self.threads = [t for t in self.threads if t.is_alive()]
            if len(self.threads) < THREADS_PER_LANE:
                thread = threading.Thread(
                    target=self._serve, name=f"outbox {self.name}", daemon=True
                )
                self.threads.append(thread)
                thread.start()

    def _serve(self) -> None:
        # A thread stays while there is work and a few seconds after, then goes.
        _local.on_lane = True
        while True:
            try:
                delivery_pk = self.ids.get(timeout=5)
            except queue.Empty:
                with self.lock:
                    if self.ids.empty():
                        self.threads = [
                            t for t in self.threads if t is not threading.current_thread()
                        ]
                        return
                continue
            try:
                self.work(delivery_pk)
            except Exception:  # the row stays queued; the sweep tries it again
                log.exception("delivery %s: attempt failed unexpectedly", delivery_pk)


_lanes: dict[str, _Lane] = {}
_pid = 0
_lock = threading.Lock()


def submit(lane: str, delivery_pk: int, work: Callable[[int], None]) -> None:
    """Run ``work(delivery_pk)`` on one of ``lane``'s threads in this process."""
    global _pid
    with _lock:
        if _pid != os.getpid():  # a forked child starts with no threads
            _lanes.clear()
            _pid = os.getpid()
        found = _lanes.get(lane)
        if found is None:
            found = _lanes[lane] = _Lane(lane, work)
    found.submit(delivery_pk)


def in_worker() -> bool:
    """This thread runs in a worker: a Celery task's, or a lane's. Work queued here can go
    to this process's lanes instead of through the broker."""
    return bool(current_task) or getattr(_local, "on_lane", False)
