"""The worker's hold on the runs it drives: leases renewed, advisory locks, cancel polls.

One thread per worker process (``LeaseKeeper``) renews the lease of every run the process
holds, in one UPDATE per beat, while the runs' threads are busy in model or tool calls;
it also notices cancel requests. Its own PostgreSQL session holds an advisory lock on
each held run, so a run whose lease ran out under a live worker is not taken over.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from django.utils import timezone

from agentweb.runs import lifecycle
from agentweb.runs.models import Run

log = logging.getLogger(__name__)

#: How often the keeper looks for cancel requests of the runs it holds (one query for
#: all of them), so a cancel lands within about this long plus the transport's poll.
CANCEL_POLL_SECONDS = 0.5
#: How long the keeper keeps its session once it holds no run: runs that follow each other
#: (a queue worked through, a person starting one run after another) find it connected;
#: a new session is a new PostgreSQL backend, a few milliseconds before the run's first
#: step.
IDLE_SECONDS = 10.0

_TRY_LOCK = b"SELECT pg_try_advisory_lock($1::int, $2::int)"


class Held:
    """One held run: its id, and the flags the keeper sets: its lease was lost, a cancel
    was asked; ``locked`` once the keeper's session holds the run's advisory lock;
    ``released`` once the run's thread let it go (its lock is then not taken any more)."""

    __slots__ = ("cancel", "locked", "lost", "released", "run_id")

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.lost = threading.Event()
        self.cancel = threading.Event()
        self.locked = False
        self.released = False


class LeaseKeeper:
    """One thread per worker process renews the leases of every run the process holds,
    in one UPDATE per beat, while the runs' threads are busy in model or tool calls.
    A lease that could not be renewed (another worker took the run over) is reported
    lost, and that run's thread stops at its next step boundary. The same thread
    notices cancel requests (every ``CANCEL_POLL_SECONDS``): the run's model call is
    abandoned at once and no tool of that step runs.

    The keeper has a PostgreSQL session of its own, outside the process's pool: under
    load the pool's connections were all lent to run threads and tool calls, the
    keeper's renewal waited for one (up to the pool's timeout, then failed, beat after
    beat) and leases ran out under live workers, whose runs were then taken over and
    their steps paid for again. That session also holds an advisory lock on each held
    run (``lifecycle.RUN_LOCK_SPACE``): while this process lives nobody takes its runs
    over, even if a renewal comes late (``lifecycle.claim`` and the sweep check the lock);
    a process that dies loses the session and its locks.

    The lock is asked for as the run is held, before its first step, by the run's own
    thread (asking in the keeper's thread let a starved keeper leave a run unlocked past
    its lease: a sweep then sent it again). The run does not wait for the answer: once
    the request is on the session's socket PostgreSQL takes the lock whatever this
    process does next, and the answer (taken, or held by a session that is letting it
    go: asked again at the next beat) is read by whoever uses the session next, the run's
    own release at the latest. One round trip less before a run's first model call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}  # lease owner -> its flags
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._db_lock = threading.Lock()  # one user of the session at a time
        self._db: Any = None  # psycopg.Connection, autocommit
        self._asked: Held | None = None  # its lock asked for, the answer not read yet
        self._inherited: list[Any] = []  # a parent's session after a fork: never closed here
        self.idle_seconds = IDLE_SECONDS
        self._last_held = 0.0  # monotonic: when a run was last held

    def hold(self, run_id: int, owner: str) -> Held:
        held = Held(run_id)
        with self._lock:
            self._held[owner] = held
            self._last_held = time.monotonic()
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                if self._pid != os.getpid() and self._db is not None:
                    self._inherited.append(self._db)  # its socket is the parent's
                    self._db = None
                    self._asked = None
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._beat, name="lease-keeper", daemon=True)
                self._thread.start()
        with self._db_lock:
            self._ask_lock(held)
        return held

    def release(self, owner: str) -> None:
        with self._lock:
            held = self._held.pop(owner, None)
            self._last_held = time.monotonic()
        if held is None:
            return
        # Under the session's lock: the keeper's beat may be retrying this run's lock right
        # now; it either sees ``released`` and does not, or has taken it and it is let go
        # here (no lock is left behind for a run nobody holds).
        with self._db_lock:
            self._read_answer()
            held.released = True
            if held.locked:
                self._query_locked(
                    "SELECT pg_advisory_unlock(%s, %s)",
                    [lifecycle.RUN_LOCK_SPACE, lifecycle.run_lock_key(held.run_id)],
                )
                held.locked = False

    # -- the keeper's own session ------------------------------------------------------------

    def _query(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]] | None:
        """Rows of one statement on the keeper's session (connected when needed), or None
        when PostgreSQL could not be reached (the session is dropped: its locks are gone,
        they are taken again on the next connection)."""
        with self._db_lock:
            return self._query_locked(sql, params)

    def _session(self) -> Any:
        """The keeper's session, connected when needed (a new one holds no lock yet).
        The caller holds ``_db_lock``."""
        if self._db is None or self._db.closed:
            params_db = dict(connection.get_connection_params())
            params_db.pop("cursor_factory", None)
            self._db = psycopg.connect(**params_db, autocommit=True)
            self._forget_locks()
        return self._db

    def _drop_session(self) -> None:
        """Close the session: its locks go with it (taken again on the next one). The
        caller holds ``_db_lock``."""
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.close()
        self._db = None
        self._forget_locks()

    def _forget_locks(self) -> None:
        """The session is new or gone: it holds no lock and no answer is pending."""
        self._asked = None
        with self._lock:
            for flags in self._held.values():
                flags.locked = False

    def _lost_session(self) -> None:
        log.warning("lease keeper: PostgreSQL is not answering", exc_info=True)
        self._drop_session()

    def _query_locked(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]] | None:
        """``_query`` for a caller that holds ``_db_lock``."""
        try:
            self._read_answer()
            cursor = self._session().execute(sql, params)
            return cursor.fetchall() if cursor.description else []
        except psycopg.Error:
            self._lost_session()
            return None

    def _ask_lock(self, flags: Held) -> None:
        """Send the request for ``flags``'s run lock on the session, without waiting for
        the answer (``_read_answer``). The caller holds ``_db_lock``."""
        if flags.released:
            return
        try:
            self._read_answer()
            pgconn = self._session().pgconn
            key = [str(lifecycle.RUN_LOCK_SPACE), str(lifecycle.run_lock_key(flags.run_id))]
            pgconn.send_query_params(_TRY_LOCK, [k.encode() for k in key])
            while pgconn.flush():  # a non-blocking session: the rest when it can take it
                _wait(pgconn.socket, select.POLLOUT)
            self._asked = flags
        except (psycopg.Error, OSError):
            self._lost_session()

    def _read_answer(self) -> None:
        """The answer to the lock request in flight, if any, read off the session (it
        comes before any later statement's). The caller holds ``_db_lock``."""
        flags, self._asked = self._asked, None
        if flags is None or self._db is None:
            return
        pgconn = self._db.pgconn
        taken = False
        try:
            while True:
                pgconn.consume_input()
                if pgconn.is_busy():
                    _wait(pgconn.socket, select.POLLIN)
                    continue
                result = pgconn.get_result()
                if result is None:
                    break
                if result.status == psycopg.pq.ExecStatus.TUPLES_OK:
                    taken = result.get_value(0, 0) == b"t"
                else:
                    message = result.error_message.decode("utf-8", "replace")
                    log.warning("lease keeper: the run lock was refused: %s", message)
        except (psycopg.Error, OSError):
            self._lost_session()
            return
        # False: another session still holds it (a worker that let the run go an instant
        # ago and unlocks now): asked again at the next beat.
        flags.locked = taken

    def close(self) -> None:
        """Let the session go now, with its locks (a test database about to be dropped;
        the keeper closes it by itself only after ``idle_seconds`` without a run)."""
        with self._db_lock:
            self._drop_session()

    def _close_if_idle(self) -> None:
        """Holding no run for ``idle_seconds``, the keeper lets its session go (a worker
        with nothing to do keeps no connection); the next ``hold`` connects again."""
        with self._db_lock:
            with self._lock:
                if self._held or time.monotonic() - self._last_held < self.idle_seconds:
                    return
            self._drop_session()

    def _take_locks(self, runs: list[Held]) -> None:
        for flags in runs:
            with self._db_lock:
                self._read_answer()  # perhaps the one this run's thread asked for
                if flags.released or flags.locked:
                    continue
                self._ask_lock(flags)
                self._read_answer()

    def _beat(self) -> None:
        interval = max(0.5, settings.AGENTWEB_LEASE_SECONDS / 3)
        next_renewal = time.monotonic() + interval
        while True:
            time.sleep(CANCEL_POLL_SECONDS)
            with self._lock:
                held = dict(self._held)
            if not held:
                self._close_if_idle()
                continue
            unlocked = [flags for flags in held.values() if not flags.locked]
            if unlocked:
                self._take_locks(unlocked)
            self._look_for_cancels(held)
            if time.monotonic() < next_renewal:
                continue
            next_renewal = time.monotonic() + interval
            rows = self._query(
                "UPDATE runs_run SET lease_expires_at = %s "
                "WHERE lease_owner = ANY(%s) AND status = %s RETURNING lease_owner",
                [timezone.now() + lifecycle.lease(), list(held), Run.Status.RUNNING],
            )
            if rows is None:  # the database is away: the leases may lapse; retry next beat
                continue
            kept = {row[0] for row in rows}
            for owner, flags in held.items():
                if owner not in kept:
                    with self._lock:
                        still_held = owner in self._held
                    if still_held:  # not a run that just finished or paused
                        flags.lost.set()

    def _look_for_cancels(self, held: dict[str, Held]) -> None:
        waiting = [owner for owner, flags in held.items() if not flags.cancel.is_set()]
        if not waiting:
            return
        rows = self._query(
            "SELECT lease_owner FROM runs_run WHERE lease_owner = ANY(%s) AND cancel_requested",
            [waiting],
        )
        for (owner,) in rows or ():
            held[owner].cancel.set()


def _wait(fd: int, event: int) -> None:
    """Until ``fd`` is ready for ``event`` (``poll``: any descriptor number, where
    ``select`` takes none past 1023)."""
    poller = select.poll()
    poller.register(fd, event | select.POLLERR | select.POLLHUP)
    poller.poll()


keeper = LeaseKeeper()
