"""Events the loop yields. The names are frozen once shipped: add new ones, never rename."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "APPROVAL_DECIDED",
    "APPROVAL_REQUESTED",
    "COMPLETION_OBJECTED",
    "CONTEXT_COMPACTED",
    "EVENT_TYPES",
    "MODEL_CALLED",
    "RUN_CANCELLED",
    "RUN_FAILED",
    "RUN_FINISHED",
    "RUN_STARTED",
    "SUBTASK_FINISHED",
    "SUBTASK_STARTED",
    "TOOL_CALL_FINISHED",
    "TOOL_CALL_STARTED",
    "Event",
]

RUN_STARTED = "run_started"
MODEL_CALLED = "model_called"
TOOL_CALL_STARTED = "tool_call_started"
TOOL_CALL_FINISHED = "tool_call_finished"
APPROVAL_REQUESTED = "approval_requested"
APPROVAL_DECIDED = "approval_decided"
CONTEXT_COMPACTED = "context_compacted"
RUN_FINISHED = "run_finished"
RUN_FAILED = "run_failed"
RUN_CANCELLED = "run_cancelled"
# Stored by the host on a parent run when it delegates (agentweb/runs/delegation.py).
SUBTASK_STARTED = "subtask_started"
SUBTASK_FINISHED = "subtask_finished"
COMPLETION_OBJECTED = "completion_objected"  # a validator sent the answer back

EVENT_TYPES = frozenset(
    {
        RUN_STARTED,
        MODEL_CALLED,
        TOOL_CALL_STARTED,
        TOOL_CALL_FINISHED,
        APPROVAL_REQUESTED,
        APPROVAL_DECIDED,
        CONTEXT_COMPACTED,
        RUN_FINISHED,
        RUN_FAILED,
        RUN_CANCELLED,
        SUBTASK_STARTED,
        SUBTASK_FINISHED,
        COMPLETION_OBJECTED,
    }
)


@dataclass(frozen=True, slots=True)
class Event:
    """One step of a run. ``data`` holds only JSON-serialisable values."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "data": self.data}
