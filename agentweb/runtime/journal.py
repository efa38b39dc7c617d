"""The execution journal: the record of side effects, keyed by call id.

The loop asks it before every tool runs (``begin``) and tells it how the call ended
(``finish``); a call id it already knows is not run again: a finished call's result is
re-used, and a call that started without an outcome (a crash in the middle) is shown to
a person. ``InMemoryJournal`` is good within one process; the Django side's durable one
is ``agentweb.runs.journal.DbJournal`` (ToolExecution rows).

A call that runs because a total is still below a limit (a ``sum_per`` approval rule)
comes with an ``Admission``: its condition is checked again when the call is recorded,
and the check and the record are one step for everyone counting the same total, so two
runs planning at the same time cannot each count the other as nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = ["Admission", "Declined", "ExecutionJournal", "InMemoryJournal", "PriorExecution"]


@dataclass(frozen=True, slots=True)
class PriorExecution:
    status: Literal["started", "succeeded", "failed"]
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Admission:
    """A condition a new call must still meet when it is recorded.

    ``check()`` returns None to let the call run, or in words why a person must decide
    it. The journal runs it only for a call id it has no record of, and admits calls
    sharing any of ``keys`` one at a time: from the start of ``check`` until the call's
    record is visible to every later ``check`` (committed, for a database)."""

    keys: tuple[str, ...]
    check: Callable[[], str | None]


@dataclass(frozen=True, slots=True)
class Declined:
    """``begin`` recorded nothing: the admission's check said a person must decide."""

    reason: str


class ExecutionJournal(Protocol):
    """The durable record of side effects, keyed by call id.

    A journal may also have ``recorded(tool, arguments) -> PriorExecution | None``: the
    result an earlier run recorded for an equal call, used instead of running it (a
    fork of a run, DESIGN §14); the turn asks it before anything else."""

    def begin(
        self,
        call_id: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        admission: Admission | None = None,
    ) -> PriorExecution | Declined | None: ...

    def finish(
        self, call_id: str, ok: bool, result: Any, error: str | None, duration_ms: float
    ) -> None: ...


class InMemoryJournal:
    """Default journal: good within one process; Django provides a durable one."""

    def __init__(self) -> None:
        self._records: dict[str, PriorExecution] = {}
        self._lock = threading.Lock()

    def begin(
        self,
        call_id: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        admission: Admission | None = None,
    ) -> PriorExecution | Declined | None:
        # Admissions of every in-memory journal of the process take turns (their checks
        # may read what the host records elsewhere); other calls never wait for them.
        if admission is None:
            with self._lock:
                prior = self._records.get(call_id)
                if prior is None:
                    self._records[call_id] = _STARTED
                return prior
        with _ADMITTING, self._lock:
            prior = self._records.get(call_id)
            if prior is not None:
                return prior
            reason = admission.check()
            if reason is not None:
                return Declined(reason)
            self._records[call_id] = _STARTED
            return None

    def finish(
        self, call_id: str, ok: bool, result: Any, error: str | None, duration_ms: float
    ) -> None:
        with self._lock:
            status: Literal["succeeded", "failed"] = "succeeded" if ok else "failed"
            self._records[call_id] = PriorExecution(status, result, error)


_ADMITTING = threading.Lock()
_STARTED = PriorExecution("started")
