"""What a stored batch of events tells traces and metrics, captured when it is stored.

``events_stored`` is called by ``actions.append_events`` inside the transaction that
stores the events; the spans and counters are produced after that transaction commits
(a rolled-back step leaves no trace), in whichever process stored the events: the worker
for steps, the web process for a decision or a cancel, beat for an expiry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction

from agentweb.observability import metrics, tracing

if TYPE_CHECKING:
    from agentweb.runs.models import Run, RunEvent

log = logging.getLogger(__name__)

FINAL_EVENTS = {"run_finished": "succeeded", "run_failed": "failed", "run_cancelled": "cancelled"}
INTERESTING = {"model_called", "tool_call_started", "tool_call_finished", "approval_decided"}
INTERESTING |= set(FINAL_EVENTS) | {"run_started"}


@dataclass
class StoredStep:
    """One ``append_events`` batch and the facts about its run at that moment."""

    run_id: int
    agent_id: int
    agent_name: str | None
    model: str
    trace_id: str
    span_id: str
    parent_span_id: str
    started_at: datetime | None
    created_at: datetime
    usage: dict[str, Any]
    failure_reason: str
    events: list[tuple[str, dict[str, Any]]]
    stored_ns: int = field(default_factory=time.time_ns)  # when the step ended
    state: Any = None  # the loop state after the step (only kept for content capture)
    _approvals: dict[str, tuple[datetime, datetime | None]] | None = None

    def agent(self) -> str:
        if self.agent_name is None:
            from agentweb.runs.models import AgentProfile

            name = AgentProfile.objects.filter(pk=self.agent_id).values_list("name", flat=True)
            self.agent_name = str(name.first() or "")
        return self.agent_name

    def approval_times(self) -> dict[str, tuple[datetime, datetime | None]]:
        """(requested_at, decided_at) of the approvals this batch decided, by call id."""
        calls = [d.get("call_id") for kind, d in self.events if kind == "approval_decided"]
        if not calls:
            return {}
        if self._approvals is None:
            from agentweb.runs.models import Approval

            rows = Approval.objects.filter(run_id=self.run_id, call_id__in=calls)
            self._approvals = {
                call_id: (requested, decided)
                for call_id, requested, decided in rows.values_list(
                    "call_id", "requested_at", "decided_at"
                )
            }
        return self._approvals

    @property
    def final_status(self) -> str | None:
        for kind, _ in self.events:
            if kind in FINAL_EVENTS:
                return FINAL_EVENTS[kind]
        return None


_step_end = threading.local()


def step_finished() -> None:
    """The engine calls this when the runtime returns a step: the moment its spans end
    at (persisting the step takes a few milliseconds more)."""
    _step_end.ns = time.time_ns()


def events_stored(run: Run, rows: Iterable[RunEvent]) -> None:
    ended = getattr(_step_end, "ns", None)
    _step_end.ns = None
    events = [(row.type, row.data) for row in rows if row.type in INTERESTING]
    if not events:
        return
    from agentweb.runs.models import Run as RunModel

    agent = run.agent if RunModel.agent.is_cached(run) else None
    step = StoredStep(
        run_id=run.pk,
        agent_id=run.agent_id,
        agent_name=agent.name if agent is not None else None,
        model=run.model,
        trace_id=run.trace_id,
        span_id=run.trace_span_id,
        parent_span_id=run.trace_parent_span_id,
        started_at=run.started_at,
        created_at=run.created_at,
        usage=dict(run.usage or {}),
        failure_reason=run.failure_reason,
        events=events,
        state=run.state if tracing.capture_content() else None,
    )
    if ended is not None:
        step.stored_ns = ended
    transaction.on_commit(lambda: _after_commit(step))


def _after_commit(step: StoredStep) -> None:
    try:
        metrics.record(step)
    except Exception:  # metrics never break a run
        log.warning("run %s: could not count the step's metrics", step.run_id, exc_info=True)
    if tracing.enabled():
        try:
            tracing.record(step)
        except Exception:
            log.warning("run %s: could not export the step's spans", step.run_id, exc_info=True)
