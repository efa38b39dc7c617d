"""Events of a run: their names, the shape of each one's ``data`` (a TypedDict per type)
and one function per type that builds it. The runtime and the host build every event
through these functions, so mypy checks the keys where an event is made.

Names and keys are frozen once shipped: add new types or optional keys, never rename.
"""

# No ``from __future__ import annotations`` here: the TypedDicts' NotRequired keys must be
# seen when the classes are made (``__optional_keys__``).
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict, cast

__all__ = [
    "APPROVAL_DECIDED",
    "APPROVAL_REQUESTED",
    "COMPLETION_OBJECTED",
    "CONTEXT_COMPACTED",
    "DATA",
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
    "ApprovalDecidedData",
    "ApprovalRequestedData",
    "CompletionObjectedData",
    "ContextCompactedData",
    "Event",
    "ModelCalledData",
    "RunCancelledData",
    "RunFailedData",
    "RunFinishedData",
    "RunStartedData",
    "SubtaskFinishedData",
    "SubtaskStartedData",
    "ToolCallFinishedData",
    "ToolCallStartedData",
    "approval_decided",
    "approval_requested",
    "completion_objected",
    "context_compacted",
    "misfit",
    "model_called",
    "run_cancelled",
    "run_failed",
    "run_finished",
    "run_started",
    "subtask_finished",
    "subtask_started",
    "tool_call_finished",
    "tool_call_started",
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


# --- payloads -------------------------------------------------------------------------


class RunStartedData(TypedDict):
    task: str
    model: str
    scripted: bool
    tools: list[str]
    max_iterations: int


class ModelCalledData(TypedDict):
    model: str
    latency_ms: float
    tokens: dict[str, int]  # {"input", "output"}
    text: str
    tool_calls: list[dict[str, Any]]  # {"id", "name", "arguments"[, "cut_off"]}
    finish_reason: str | None
    iteration: int
    cut_off: NotRequired[bool]  # stopped at the output token limit
    truncated: NotRequired[bool]  # longer than the installation keeps
    reasoning: NotRequired[str]
    context: NotRequired[dict[str, Any]]  # what the model saw (layers, tools, tokens)
    cost_usd: NotRequired[float]  # added by the host when it stores the event


class ToolCallStartedData(TypedDict):
    call_id: str
    tool: str
    arguments: Any
    risk: str
    # Who let a medium/high-risk or policy-checked call run: {"by": "person"} or
    # {"by": "policy", "reason": ...}
    approval: NotRequired[dict[str, str]]
    repaired: NotRequired[dict[str, Any]]  # what the parser fixed in the arguments
    reused: NotRequired[bool]  # the journal had the result already


class ToolCallFinishedData(TypedDict):
    call_id: str
    tool: str
    ok: bool
    result: Any
    error: str | None
    duration_ms: float
    truncated: NotRequired[bool]  # the model saw a cut version
    reused: NotRequired[bool]
    images: NotRequired[list[dict[str, Any]]]  # stored image references
    image_notes: NotRequired[list[str]]


class ApprovalRequestedData(TypedDict):
    call_id: str
    tool: str
    arguments: Any
    risk: str
    reason: str | None  # high_risk | policy | malformed_arguments | unknown_outcome; host: ""
    why: NotRequired[str]  # in words: what a rule found (e.g. the total it reached)


Decision = Literal["approved", "rejected", "expired"]


class ApprovalDecidedData(TypedDict):
    call_id: str
    decision: Decision
    comment: str
    arguments: Any  # what runs (None when rejected, in the runtime's copy)
    tool: NotRequired[str]  # the host's record also says what, whether edited, and who
    edited: NotRequired[bool]
    by: NotRequired[str | None]  # None: nobody (expired)


class ContextCompactedData(TypedDict):
    tokens_before: int
    tokens_after: int
    budget: int
    actions: list[str]
    window_start: int
    # ... and one key per action taken (e.g. "digested": [call ids]), see context.py


class RunFinishedData(TypedDict):
    final_answer: str
    decided_by: str
    usage: dict[str, Any]
    reason: NotRequired[str]  # why it stopped early (bounds)
    truncated: NotRequired[bool]


class RunFailedData(TypedDict):
    reason: str


class RunCancelledData(TypedDict, total=False):
    iteration: int  # the runtime's copy
    by: str  # the host's record: who or what cancelled


class SubtaskStartedData(TypedDict):
    task_id: int
    agent: str
    task: str


class SubtaskFinishedData(TypedDict):
    task_id: int
    status: Literal["succeeded", "failed"]
    result: NotRequired[str]  # the child's answer, cut to a size the parent's model reads
    truncated: NotRequired[bool]
    error: NotRequired[str]


class CompletionObjectedData(TypedDict):
    validator: str
    reason: str


#: The ``data`` shape of each event type.
DATA: dict[str, type] = {
    RUN_STARTED: RunStartedData,
    MODEL_CALLED: ModelCalledData,
    TOOL_CALL_STARTED: ToolCallStartedData,
    TOOL_CALL_FINISHED: ToolCallFinishedData,
    APPROVAL_REQUESTED: ApprovalRequestedData,
    APPROVAL_DECIDED: ApprovalDecidedData,
    CONTEXT_COMPACTED: ContextCompactedData,
    RUN_FINISHED: RunFinishedData,
    RUN_FAILED: RunFailedData,
    RUN_CANCELLED: RunCancelledData,
    SUBTASK_STARTED: SubtaskStartedData,
    SUBTASK_FINISHED: SubtaskFinishedData,
    COMPLETION_OBJECTED: CompletionObjectedData,
}


def misfit(kind: str, data: Mapping[str, Any]) -> list[str]:
    """How ``data`` differs from the shape of ``kind``: missing and unknown keys (empty
    when it fits). ``context_compacted`` also carries one key per action it names."""
    shape = DATA.get(kind)
    if shape is None:
        return [f"unknown event type {kind!r}"]
    required: frozenset[str] = shape.__required_keys__  # type: ignore[attr-defined]
    known = required | shape.__optional_keys__  # type: ignore[attr-defined]
    if kind == CONTEXT_COMPACTED:
        known = known | set(data.get("actions") or ())
    problems = [f"missing {k!r}" for k in sorted(required - set(data))]
    problems += [f"unknown {k!r}" for k in sorted(set(data) - known)]
    return problems


# --- builders ---------------------------------------------------------------------------


def _event(kind: str, data: Mapping[str, Any]) -> Event:
    return Event(kind, cast("dict[str, Any]", data))


def run_started(
    *, task: str, model: str, scripted: bool, tools: list[str], max_iterations: int
) -> Event:
    data: RunStartedData = {
        "task": task,
        "model": model,
        "scripted": scripted,
        "tools": tools,
        "max_iterations": max_iterations,
    }
    return _event(RUN_STARTED, data)


def model_called(
    *,
    model: str,
    latency_ms: float,
    input_tokens: int,
    output_tokens: int,
    text: str,
    tool_calls: list[dict[str, Any]],
    finish_reason: str | None,
    iteration: int,
    cut_off: bool = False,
    truncated: bool = False,
    reasoning: str | None = None,
    context: dict[str, Any] | None = None,
) -> Event:
    data: ModelCalledData = {
        "model": model,
        "latency_ms": latency_ms,
        "tokens": {"input": input_tokens, "output": output_tokens},
        "text": text,
        "tool_calls": tool_calls,
        "finish_reason": finish_reason,
        "iteration": iteration,
    }
    if cut_off:
        data["cut_off"] = True
    if truncated:
        data["truncated"] = True
    if reasoning:
        data["reasoning"] = reasoning
    if context:
        data["context"] = context
    return _event(MODEL_CALLED, data)


def tool_call_started(
    *,
    call_id: str,
    tool: str,
    arguments: Any,
    risk: str,
    approval: dict[str, str] | None = None,
    repaired: Mapping[str, Any] | None = None,
    reused: bool = False,
) -> Event:
    data: ToolCallStartedData = {
        "call_id": call_id,
        "tool": tool,
        "arguments": arguments,
        "risk": risk,
    }
    if approval is not None:
        data["approval"] = approval
    if repaired:
        data["repaired"] = dict(repaired)
    if reused:
        data["reused"] = True
    return _event(TOOL_CALL_STARTED, data)


def tool_call_finished(
    *,
    call_id: str,
    tool: str,
    ok: bool,
    result: Any,
    error: str | None,
    duration_ms: float,
    truncated: bool = False,
    reused: bool = False,
) -> Event:
    """Images are added to ``data`` by whoever stores them (``images``, ``image_notes``)."""
    data: ToolCallFinishedData = {
        "call_id": call_id,
        "tool": tool,
        "ok": ok,
        "result": result,
        "error": error,
        "duration_ms": duration_ms,
    }
    if truncated:
        data["truncated"] = True
    if reused:
        data["reused"] = True
    return _event(TOOL_CALL_FINISHED, data)


def approval_requested(
    *,
    call_id: str,
    tool: str,
    arguments: Any,
    risk: str,
    reason: str | None,
    why: str | None = None,
) -> Event:
    data: ApprovalRequestedData = {
        "call_id": call_id,
        "tool": tool,
        "arguments": arguments,
        "risk": risk,
        "reason": reason,
    }
    if why:
        data["why"] = why
    return _event(APPROVAL_REQUESTED, data)


def approval_decided(
    *,
    call_id: str,
    decision: Decision,
    comment: str,
    arguments: Any,
    tool: str | None = None,
    edited: bool = False,
    by: str | None = None,
) -> Event:
    """The runtime's copy names the call only; the host's record (``tool`` given) also
    says whether the arguments were edited and who decided (``by`` None: nobody)."""
    data: ApprovalDecidedData = {
        "call_id": call_id,
        "decision": decision,
        "comment": comment,
        "arguments": arguments,
    }
    if tool is not None:
        data["tool"] = tool
        data["edited"] = edited
        data["by"] = by
    return _event(APPROVAL_DECIDED, data)


def context_compacted(
    *,
    tokens_before: int,
    tokens_after: int,
    budget: int,
    done: Mapping[str, Any],
    actions: list[str],
    window_start: int,
) -> Event:
    """``done`` holds one key per action taken, with what it acted on."""
    data = {
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "budget": budget,
        "actions": actions,
        **done,
        "window_start": window_start,
    }
    return _event(CONTEXT_COMPACTED, data)


def run_finished(
    *,
    final_answer: str,
    decided_by: str,
    usage: dict[str, Any],
    reason: str | None = None,
    truncated: bool = False,
) -> Event:
    data: RunFinishedData = {"final_answer": final_answer, "decided_by": decided_by, "usage": usage}
    if reason:
        data["reason"] = reason
    if truncated:
        data["truncated"] = True
    return _event(RUN_FINISHED, data)


def run_failed(*, reason: str) -> Event:
    data: RunFailedData = {"reason": reason}
    return _event(RUN_FAILED, data)


def run_cancelled(*, iteration: int | None = None, by: str | None = None) -> Event:
    data: RunCancelledData = {}
    if iteration is not None:
        data["iteration"] = iteration
    if by is not None:
        data["by"] = by
    return _event(RUN_CANCELLED, data)


def subtask_started(*, task_id: int, agent: str, task: str) -> Event:
    data: SubtaskStartedData = {"task_id": task_id, "agent": agent, "task": task}
    return _event(SUBTASK_STARTED, data)


def subtask_finished(result: SubtaskFinishedData) -> Event:
    """``result`` is what the parent's model reads about the child (``task_result``)."""
    return _event(SUBTASK_FINISHED, result)


def completion_objected(*, validator: str, reason: str) -> Event:
    data: CompletionObjectedData = {"validator": validator, "reason": reason}
    return _event(COMPLETION_OBJECTED, data)
