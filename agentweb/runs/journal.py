"""The durable record of tool side effects: one ToolExecution row per (run, call id).

The row is committed *before* the tool runs, so a crash in the middle leaves a
"started" row behind, and a resumed run never repeats a recorded execution.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentweb.runs.models import AuditEntry, Run, ToolExecution
from agentweb.runtime.loop import PriorExecution


class DbJournal:
    def __init__(self, run: Run, risk_of: Any = None) -> None:
        self.run = run
        self._risk_of = risk_of or (lambda name: "low")
        self._tools: dict[str, str] = {}

    def begin(self, call_id: str, tool: str, arguments: dict[str, Any]) -> PriorExecution | None:
        try:
            with transaction.atomic():
                ToolExecution.objects.create(
                    run=self.run, call_id=call_id, tool=tool, arguments=arguments
                )
        except IntegrityError:
            prior = ToolExecution.objects.get(run=self.run, call_id=call_id)
            # "unknown" (a crash mid-call, not yet cleared by a person) reads as "started".
            status = "started" if prior.status == ToolExecution.Status.UNKNOWN else prior.status
            return PriorExecution(
                status=status,  # type: ignore[arg-type]
                result=prior.result,
                error=prior.error or None,
            )
        self._tools[call_id] = tool
        return None

    def finish(
        self,
        call_id: str,
        ok: bool,
        result: Any,
        error: str | None,
        duration_ms: float,
    ) -> None:
        status = ToolExecution.Status.SUCCEEDED if ok else ToolExecution.Status.FAILED
        with transaction.atomic():
            ToolExecution.objects.filter(run=self.run, call_id=call_id).update(
                status=status,
                result=result,
                error=error or "",
                finished_at=timezone.now(),
                duration_ms=duration_ms,
            )
            tool = self._tools.pop(call_id, "")
            if self._risk_of(tool) == "high":
                execution = ToolExecution.objects.get(run=self.run, call_id=call_id)
                AuditEntry.objects.create(
                    action="high_risk_tool_executed",
                    actor=None,
                    run=self.run,
                    data={
                        "call_id": call_id,
                        "tool": tool,
                        "arguments": execution.arguments,
                        "ok": ok,
                        "error": error,
                        "requested_by": self.run.created_by.get_username(),
                    },
                )
