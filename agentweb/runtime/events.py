"""Events of a run: one dataclass per type, ``Event`` their union, discriminated by
``type``. An event is a record of what happened: nothing changes one once it is made (they
are not frozen only because a frozen dataclass costs twice as much to make, and the loop
makes a dozen per run).

An event's stored form is ``{"type": ..., "data": {...}}`` (``to_json``); ``data`` holds
its fields in the order they are declared, an optional key only when it says something
(a flag when true, a value when given), exactly as the events shipped before these
classes. ``parse(type, data)`` reads a stored event back (``RunEvent.as_event()`` on the
Django side) and refuses data that does not fit its type. Readers match on the classes::

    match event:
        case ModelCalled(tokens=tokens): ...
        case ToolCallFinished(ok=False, error=error): ...

Names and keys are frozen once shipped: add new types or optional keys, never rename
or reshape. A new optional key is a field with a default and one of the ``IF_*``
metadata below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypedDict, get_args

__all__ = [
    "APPROVAL_DECIDED",
    "APPROVAL_GIVEN",
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
    "UNSET",
    "ApprovalDecided",
    "ApprovalGiven",
    "ApprovalRequested",
    "CompletionObjected",
    "ContextCompacted",
    "Event",
    "EventShapeError",
    "ModelCalled",
    "RunCancelled",
    "RunFailed",
    "RunFinished",
    "RunStarted",
    "SubtaskFinished",
    "SubtaskFinishedData",
    "SubtaskStarted",
    "ToolCallFinished",
    "ToolCallStarted",
    "Unset",
    "misfit",
    "parse",
    "read",
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
APPROVAL_GIVEN = "approval_given"  # stored by the host: one person of a quorum approved


class EventShapeError(ValueError):
    """Stored data that does not fit its event type (``parse``)."""


# -- how a field is stored ------------------------------------------------------------------
#
# A field without metadata is a key always stored (it may hold None). An optional key is a
# field with a default and ``metadata=`` one of these: its key is stored only when
# ``keep(value, event)`` says so, and read back as the default when absent.

Keep = Callable[[Any, Any], bool]  # (value, event) -> whether its key is stored


class Unset:
    """The value of a field whose key is absent, where the key may also hold None."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = Unset()


def _truthy(value: Any, event: Any) -> bool:
    return bool(value)


def _given(value: Any, event: Any) -> bool:
    return value is not None


def _set(value: Any, event: Any) -> bool:
    return value is not UNSET


def _hosts_record(value: Any, event: Any) -> bool:
    return event.tool is not None


IF_TRUE: Mapping[str, Keep] = {"keep": _truthy}  # a flag when true, a value when not empty
IF_GIVEN: Mapping[str, Keep] = {"keep": _given}  # a value when not None
IF_SET: Mapping[str, Keep] = {"keep": _set}  # a value (None included) when not UNSET
HOSTS_RECORD: Mapping[str, Keep] = {"keep": _hosts_record}  # with the host's ``tool``


@dataclass(frozen=True, slots=True)
class _Spec:
    """The stored keys of one event class, in order."""

    keys: tuple[tuple[str, Keep | None], ...]  # (name, keep) — keep None: always stored
    required: frozenset[str]
    known: frozenset[str]
    spread: str | None  # a field whose dict's keys are stored in its place


_SPECS: dict[type, _Spec] = {}


def _spec(cls: type) -> _Spec:
    spec = _SPECS.get(cls)
    if spec is None:
        fields = [f for f in dataclasses.fields(cls) if f.name != "type"]
        spread = getattr(cls, "_spread", None)
        spec = _Spec(
            keys=tuple((f.name, f.metadata.get("keep")) for f in fields),
            required=frozenset(
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ),
            known=frozenset(f.name for f in fields if f.name != spread),
            spread=spread,
        )
        _SPECS[cls] = spec
    return spec


class _EventBase:
    """What every event class has: its stored ``data`` and ``to_json``."""

    __slots__ = ()
    type: str
    _spread: ClassVar[str | None] = None

    @property
    def data(self) -> dict[str, Any]:
        """The stored ``data`` (a new dict each time)."""
        out: dict[str, Any] = {}
        spread = self._spread
        for name, keep in _spec(type(self)).keys:
            value = getattr(self, name)
            if name == spread:
                out.update(value)
            elif keep is None or keep(value, self):
                out[name] = value
        return out

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "data": self.data}


# -- the events -----------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class RunStarted(_EventBase):
    type: Literal["run_started"] = field(default="run_started", init=False)
    task: str
    model: str
    scripted: bool
    tools: list[str]
    max_iterations: int
    # The system prompt as the model is given it (rendered, with what the host added).
    system_prompt: str | None = field(default=None, metadata=IF_GIVEN)
    # The version of the agent profile the run runs, when the host keeps versions.
    agent_version: int | None = field(default=None, metadata=IF_GIVEN)
    # Tools the profile names that the host cannot offer (not loaded): said, not hidden.
    missing_tools: list[str] = field(default_factory=list, metadata=IF_TRUE)


@dataclass(slots=True, kw_only=True)
class ModelCalled(_EventBase):
    type: Literal["model_called"] = field(default="model_called", init=False)
    model: str
    latency_ms: float
    tokens: dict[str, int]  # {"input", "output"}
    text: str
    tool_calls: list[dict[str, Any]]  # {"id", "name", "arguments"[, "cut_off"]}
    finish_reason: str | None
    iteration: int
    cut_off: bool = field(default=False, metadata=IF_TRUE)  # stopped at the output token limit
    truncated: bool = field(default=False, metadata=IF_TRUE)  # longer than the installation keeps
    reasoning: str | None = field(default=None, metadata=IF_TRUE)
    # what the model saw (layers, tools, tokens)
    context: dict[str, Any] | None = field(default=None, metadata=IF_TRUE)
    # the messages and tool specs it was sent, each message stored once per run
    # (runtime.trace: {"from", "new", "window"[, "tools"]}); absent in older runs
    sent: dict[str, Any] | None = field(default=None, metadata=IF_TRUE)
    # Added by the host when it stores the event (None: the model's price is unknown).
    cost_usd: float | Unset | None = field(default=UNSET, metadata=IF_SET)

    @property
    def cost(self) -> float | None:
        """What the call cost, when the host knew the price."""
        return self.cost_usd if isinstance(self.cost_usd, int | float) else None


@dataclass(slots=True, kw_only=True)
class ToolCallStarted(_EventBase):
    type: Literal["tool_call_started"] = field(default="tool_call_started", init=False)
    call_id: str
    tool: str
    arguments: Any
    risk: str
    # Who let a medium/high-risk or policy-checked call run: {"by": "person"} or
    # {"by": "policy", "reason": ...}
    approval: dict[str, str] | None = field(default=None, metadata=IF_GIVEN)
    # what the parser fixed in the arguments
    repaired: dict[str, Any] | None = field(default=None, metadata=IF_TRUE)
    reused: bool = field(default=False, metadata=IF_TRUE)  # the journal had the result already
    dry: bool = field(default=False, metadata=IF_TRUE)  # a dry run's call: not executed
    recorded: bool = field(default=False, metadata=IF_TRUE)  # a fork's source had the result


@dataclass(slots=True, kw_only=True)
class ToolCallFinished(_EventBase):
    type: Literal["tool_call_finished"] = field(default="tool_call_finished", init=False)
    call_id: str
    tool: str
    ok: bool
    result: Any
    error: str | None
    duration_ms: float
    truncated: bool = field(default=False, metadata=IF_TRUE)  # the model saw a cut version
    reused: bool = field(default=False, metadata=IF_TRUE)
    # a dry run's medium/high-risk call, not executed: the result says what would be called
    dry: bool = field(default=False, metadata=IF_TRUE)
    # the result recorded for an equal call (same tool and arguments) of the run forked from
    recorded: bool = field(default=False, metadata=IF_TRUE)
    # stored image references
    images: list[dict[str, Any]] | None = field(default=None, metadata=IF_TRUE)
    image_notes: list[str] | None = field(default=None, metadata=IF_TRUE)


@dataclass(slots=True, kw_only=True)
class ApprovalRequested(_EventBase):
    type: Literal["approval_requested"] = field(default="approval_requested", init=False)
    call_id: str
    tool: str
    arguments: Any
    risk: str
    reason: str | None  # high_risk | policy | malformed_arguments | unknown_outcome; host: ""
    # in words: what a rule found (e.g. the total it reached)
    why: str | None = field(default=None, metadata=IF_TRUE)


@dataclass(slots=True, kw_only=True)
class ApprovalDecided(_EventBase):
    """The runtime's copy names the call only; the host's record (``tool`` given) also
    says whether the arguments were edited and who decided (``by`` None: nobody)."""

    type: Literal["approval_decided"] = field(default="approval_decided", init=False)
    call_id: str
    decision: Literal["approved", "rejected", "expired"]
    comment: str
    arguments: Any  # what runs (None when rejected, in the runtime's copy)
    tool: str | None = field(default=None, metadata=HOSTS_RECORD)
    edited: bool = field(default=False, metadata=HOSTS_RECORD)
    by: str | None = field(default=None, metadata=HOSTS_RECORD)


@dataclass(slots=True, kw_only=True)
class ApprovalGiven(_EventBase):
    """Stored by the host: one person of a quorum approved a call, which waits for the
    others (``given`` of ``needed`` distinct people so far)."""

    type: Literal["approval_given"] = field(default="approval_given", init=False)
    call_id: str
    tool: str
    by: str
    given: int
    needed: int
    edited: bool  # this person changed the arguments: the others approve those


@dataclass(slots=True, kw_only=True)
class ContextCompacted(_EventBase):
    """``done`` holds one key per action taken, with what it acted on; they are stored
    as keys of their own, between ``actions`` and ``window_start``."""

    type: Literal["context_compacted"] = field(default="context_compacted", init=False)
    _spread: ClassVar[str | None] = "done"
    tokens_before: int
    tokens_after: int
    budget: int
    actions: list[str]
    done: dict[str, Any] = field(default_factory=dict)
    window_start: int


@dataclass(slots=True, kw_only=True)
class RunFinished(_EventBase):
    type: Literal["run_finished"] = field(default="run_finished", init=False)
    final_answer: str
    decided_by: str
    usage: dict[str, Any]
    reason: str | None = field(default=None, metadata=IF_TRUE)  # why it stopped early (bounds)
    truncated: bool = field(default=False, metadata=IF_TRUE)


@dataclass(slots=True, kw_only=True)
class RunFailed(_EventBase):
    type: Literal["run_failed"] = field(default="run_failed", init=False)
    reason: str
    # the host's budget that stopped the run before a model call (BudgetExceeded.scope)
    budget: str | None = field(default=None, metadata=IF_GIVEN)


@dataclass(slots=True, kw_only=True)
class RunCancelled(_EventBase):
    type: Literal["run_cancelled"] = field(default="run_cancelled", init=False)
    iteration: int | None = field(default=None, metadata=IF_GIVEN)  # the runtime's copy
    # the host's record: who or what cancelled
    by: str | None = field(default=None, metadata=IF_GIVEN)


@dataclass(slots=True, kw_only=True)
class SubtaskStarted(_EventBase):
    type: Literal["subtask_started"] = field(default="subtask_started", init=False)
    task_id: int
    agent: str
    task: str


@dataclass(slots=True, kw_only=True)
class SubtaskFinished(_EventBase):
    """What the parent's model reads about the child (``task_result``)."""

    type: Literal["subtask_finished"] = field(default="subtask_finished", init=False)
    task_id: int
    status: Literal["succeeded", "failed"]
    # the child's answer, cut to a readable size
    result: str | None = field(default=None, metadata=IF_GIVEN)
    truncated: bool = field(default=False, metadata=IF_TRUE)
    error: str | None = field(default=None, metadata=IF_GIVEN)


@dataclass(slots=True, kw_only=True)
class CompletionObjected(_EventBase):
    type: Literal["completion_objected"] = field(default="completion_objected", init=False)
    validator: str
    reason: str


Event = (
    RunStarted
    | ModelCalled
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalRequested
    | ApprovalDecided
    | ContextCompacted
    | RunFinished
    | RunFailed
    | RunCancelled
    | SubtaskStarted
    | SubtaskFinished
    | CompletionObjected
    | ApprovalGiven
)

#: Each event type's class.
CLASSES: dict[str, type[Event]] = {
    cls.__dataclass_fields__["type"].default: cls for cls in get_args(Event)
}
EVENT_TYPES = frozenset(CLASSES)


def misfit(kind: str, data: Mapping[str, Any]) -> list[str]:
    """How ``data`` differs from the shape of ``kind``: missing and unknown keys (empty
    when it fits). ``context_compacted`` also carries one key per action it names."""
    cls = CLASSES.get(kind)
    if cls is None:
        return [f"unknown event type {kind!r}"]
    spec = _spec(cls)
    known = spec.known
    if spec.spread is not None:
        known = known | set(data.get("actions") or ())
    problems = [f"missing {k!r}" for k in sorted(spec.required - set(data))]
    problems += [f"unknown {k!r}" for k in sorted(set(data) - known)]
    return problems


def parse(kind: str, data: Mapping[str, Any]) -> Event:
    """The event a stored ``{"type": kind, "data": data}`` is; ``EventShapeError`` when
    ``data`` does not fit ``kind``. ``parse(e.type, e.data) == e`` for every event."""
    problems = misfit(kind, data)
    if problems:
        raise EventShapeError(f"{kind}: " + ", ".join(problems))
    cls = CLASSES[kind]
    spec = _spec(cls)
    if spec.spread is None:
        return cls(**data)
    values = {k: v for k, v in data.items() if k in spec.known}
    values[spec.spread] = {k: v for k, v in data.items() if k not in spec.known}
    return cls(**values)


def read(kind: str, data: Any) -> Event | None:
    """A stored row of any age as its event, for readers that must show every row (the
    pages): ``parse`` when it fits; a row of a known type that does not (an older or
    partial shape, a file's) as its class all the same, a missing key read as None and an
    unknown one left out (the row's data still has it); None for an unknown type.

    Values are not checked, so a reader of such an event treats a None or ill-typed field
    as absent, as it would read the row's dict."""
    cls = CLASSES.get(kind)
    if cls is None:
        return None
    if isinstance(data, Mapping):
        try:
            return parse(kind, data)
        except (EventShapeError, TypeError):  # TypeError: an ill-typed "actions"
            pass
    given: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
    spec = _spec(cls)
    values: dict[str, Any] = {k: given.get(k) for k in spec.required}
    values.update((k, v) for k, v in given.items() if k in spec.known)
    if spec.spread is not None:
        actions = given.get("actions")
        names = {a for a in actions if isinstance(a, str)} if isinstance(actions, list) else set()
        values[spec.spread] = {k: v for k, v in given.items() if k in names and k not in spec.known}
    return cls(**values)


# -- what the parent's model reads about a child (delegation) --------------------------------


class SubtaskFinishedData(TypedDict, total=False):
    """A ``subtask_finished`` event's data: the child's result as the parent's delegating
    tool returns it to the model."""

    task_id: int
    status: Literal["succeeded", "failed"]
    result: str
    truncated: bool
    error: str


# -- the host's spellings (agentweb/runs builds its events with these) ------------------------

run_cancelled = RunCancelled
run_failed = RunFailed
approval_requested = ApprovalRequested
approval_decided = ApprovalDecided
approval_given = ApprovalGiven
subtask_started = SubtaskStarted


def subtask_finished(result: SubtaskFinishedData) -> SubtaskFinished:
    return SubtaskFinished(**result)
