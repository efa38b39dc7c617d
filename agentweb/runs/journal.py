"""The durable record of tool executions: one ToolExecution row per (run, call id).

For a tool with side effects (not idempotent) the row is committed *before* the tool
runs, so a crash in the middle leaves a "started" row behind, and a resumed run never
repeats a recorded execution. An idempotent tool (a read) may safely run again, so its
row is written with the step that used its result, in the same transaction, which saves
two round trips per read on the hot path.

A call admitted by a ``sum_per`` total (``Admission``) is recorded in one transaction
that first takes a PostgreSQL advisory lock per key (the tool and the group, e.g. one
order), then re-counts the total and inserts the row: the lock is released when the row
is committed, so every process counting that total sees the call from then on, and two
runs that planned at the same time are admitted one after the other.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agentweb import dbpool
from agentweb.runs import store
from agentweb.runs.batch import Batch
from agentweb.runs.faults import crash_point
from agentweb.runs.models import Run, ToolExecution
from agentweb.runtime.journal import Admission, Declined, PriorExecution
from agentweb.runtime.tools import Tool


class DbJournal:
    def __init__(
        self,
        run: Run,
        tool_of: Callable[[str], Tool | None] = lambda name: None,
        risk_of: Callable[[str], str] = lambda name: "high",
    ) -> None:
        self.run = run
        self._tool_of = tool_of
        self._risk_of = risk_of
        self._lock = threading.Lock()
        self._deferred: dict[str, ToolExecution] = {}

    def _durable_first(self, tool: str) -> bool:
        found = self._tool_of(tool)
        return found is None or not found.idempotent or self._risk_of(tool) != "low"

    def begin(
        self,
        call_id: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        admission: Admission | None = None,
    ) -> PriorExecution | Declined | None:
        if admission is not None:
            return self._admit(call_id, tool, arguments, admission)
        if not self._durable_first(tool):
            with self._lock:
                self._deferred[call_id] = ToolExecution(
                    run=self.run,
                    call_id=call_id,
                    tool=tool,
                    arguments=arguments,
                    started_at=timezone.now(),
                )
            return None
        try:
            with transaction.atomic():
                ToolExecution.objects.create(
                    run=self.run, call_id=call_id, tool=tool, arguments=arguments
                )
            crash_point("tool_begun", [tool])
            dbpool.give_back()  # the caller now waits on the tool call
        except IntegrityError:
            return self._prior(call_id)
        return None

    def _admit(
        self, call_id: str, tool: str, arguments: dict[str, Any], admission: Admission
    ) -> PriorExecution | Declined | None:
        """Lock, re-count, record: one transaction, committed before the tool runs."""
        try:
            with transaction.atomic():
                _lock(admission.keys)
                if ToolExecution.objects.filter(run=self.run, call_id=call_id).exists():
                    return self._prior(call_id)
                reason = admission.check()
                if reason is not None:
                    return Declined(reason)
                ToolExecution.objects.create(
                    run=self.run, call_id=call_id, tool=tool, arguments=arguments
                )
            crash_point("tool_begun", [tool])
            dbpool.give_back()  # the caller now waits on the tool call, as in ``begin``
        except IntegrityError:  # the same call recorded meanwhile (a lease taken over)
            return self._prior(call_id)
        return None

    def _prior(self, call_id: str) -> PriorExecution:
        prior = ToolExecution.objects.get(run=self.run, call_id=call_id)
        # "unknown" (a crash mid-call, not yet cleared by a person) reads as "started".
        status = "started" if prior.status == ToolExecution.Status.UNKNOWN else prior.status
        return PriorExecution(
            status=status,  # type: ignore[arg-type]
            result=prior.result,
            error=prior.error or None,
        )

    def finish(
        self,
        call_id: str,
        ok: bool,
        result: Any,
        error: str | None,
        duration_ms: float,
    ) -> None:
        status = ToolExecution.Status.SUCCEEDED if ok else ToolExecution.Status.FAILED
        now = timezone.now()
        with self._lock:
            deferred = self._deferred.get(call_id)
        tool = deferred.tool if deferred is not None else self._tool_name(call_id)
        crash_point("tool_returned", [tool])
        if deferred is not None:
            deferred.status, deferred.result, deferred.error = status, result, error or ""
            deferred.finished_at, deferred.duration_ms = now, duration_ms
            return
        with transaction.atomic():
            ToolExecution.objects.filter(run=self.run, call_id=call_id).update(
                status=status,
                result=result,
                error=error or "",
                finished_at=now,
                duration_ms=duration_ms,
            )
            execution = ToolExecution.objects.only("tool", "arguments").get(
                run=self.run, call_id=call_id
            )
            if self._risk_of(execution.tool) == "high":
                store.audit(
                    "high_risk_tool_executed",
                    actor=None,
                    run=self.run,
                    call_id=call_id,
                    tool=execution.tool,
                    arguments=execution.arguments,
                    ok=ok,
                    error=error,
                    requested_by=self.run.created_by.get_username(),
                )
        crash_point("tool_recorded", [tool])

    def _tool_name(self, call_id: str) -> str:
        if not settings.AGENTWEB_TEST_CRASH_AT:
            return ""
        row = ToolExecution.objects.filter(run=self.run, call_id=call_id).only("tool").first()
        return row.tool if row is not None else ""

    def deferred(self) -> dict[str, ToolExecution]:
        """The reads' rows not written yet (``defer_again`` puts them back after a step's
        transaction that wrote them was rolled back)."""
        with self._lock:
            return dict(self._deferred)

    def defer_again(self, rows: dict[str, ToolExecution]) -> None:
        with self._lock:
            self._deferred = {**rows, **self._deferred}

    def save_deferred(self, batch: Batch | None = None) -> None:
        """Write the reads' rows; called inside the step's transaction (with a ``batch``,
        the INSERT joins it)."""
        with self._lock:
            rows, self._deferred = list(self._deferred.values()), {}
        if not rows:
            return
        if batch is None:
            ToolExecution.objects.bulk_create(rows, ignore_conflicts=True)
        else:
            batch.insert(ToolExecution, rows, ignore_conflicts=True)


#: The first half of every advisory lock key taken here: totals of calls, not other users
#: of advisory locks in the same database.
_TOTALS_LOCK_SPACE = 0x61770001  # "aw" 0001


def _lock(keys: Iterable[str]) -> None:
    """Transaction-level advisory locks on ``keys``, always taken in one order (sorted),
    so two transactions that share keys queue instead of deadlocking. A hash collision
    only makes two totals wait for each other."""
    ids = sorted({_lock_id(key) for key in keys})
    with connection.cursor() as cursor:
        for lock_id in ids:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_TOTALS_LOCK_SPACE, lock_id])


def _lock_id(key: str) -> int:
    digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)
