"""The execution journal: the record of side effects, keyed by call id.

The loop asks it before every tool runs (``begin``) and tells it how the call ended
(``finish``); a call id it already knows is not run again: a finished call's result is
re-used, and a call that started without an outcome (a crash in the middle) is shown to
a person. ``InMemoryJournal`` is good within one process; the Django side's durable one
is ``agentweb.runs.journal.DbJournal`` (ToolExecution rows).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = ["ExecutionJournal", "InMemoryJournal", "PriorExecution"]


@dataclass(frozen=True, slots=True)
class PriorExecution:
    status: Literal["started", "succeeded", "failed"]
    result: Any = None
    error: str | None = None


class ExecutionJournal(Protocol):
    """The durable record of side effects, keyed by call id."""

    def begin(
        self, call_id: str, tool: str, arguments: dict[str, Any]
    ) -> PriorExecution | None: ...

    def finish(
        self, call_id: str, ok: bool, result: Any, error: str | None, duration_ms: float
    ) -> None: ...


class InMemoryJournal:
    """Default journal: good within one process; Django provides a durable one."""

    def __init__(self) -> None:
        self._records: dict[str, PriorExecution] = {}
        self._lock = threading.Lock()

    def begin(self, call_id: str, tool: str, arguments: dict[str, Any]) -> PriorExecution | None:
        with self._lock:
            prior = self._records.get(call_id)
            if prior is None:
                self._records[call_id] = PriorExecution("started")
            return prior

    def finish(
        self, call_id: str, ok: bool, result: Any, error: str | None, duration_ms: float
    ) -> None:
        with self._lock:
            status: Literal["succeeded", "failed"] = "succeeded" if ok else "failed"
            self._records[call_id] = PriorExecution(status, result, error)
