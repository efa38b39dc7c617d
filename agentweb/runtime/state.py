"""A run between steps: ``LoopState`` (plain JSON, so another process can resume it),
the calls of the turn being resolved, the decisions people send, and the outcome a step
ends with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .events import Event
from .messages import Attachment, Message, Usage

__all__ = [
    "TERMINAL",
    "CallState",
    "Cancelled",
    "DecidedBy",
    "Decision",
    "Failed",
    "Finished",
    "LoopState",
    "NeedsApproval",
    "NeedsSubtasks",
    "Outcome",
    "PendingCall",
    "Status",
    "StepResult",
    "TurnCall",
]

Status = Literal[
    "running", "waiting_approval", "waiting_subtasks", "finished", "failed", "cancelled"
]
DecidedBy = Literal["validator", "model", "bounds"]
TERMINAL = frozenset({"finished", "failed", "cancelled"})


# -- decisions and outcomes ----------------------------------------------------------------


class PendingCall(BaseModel):
    call_id: str
    tool: str
    arguments: dict[str, Any]
    risk: str
    reason: str  # "high_risk" | "policy" | "malformed_arguments" | "unknown_outcome"


class Decision(BaseModel):
    call_id: str
    approved: bool
    comment: str = ""
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    answer: str
    decided_by: DecidedBy
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    calls: list[PendingCall]


@dataclass(frozen=True, slots=True)
class NeedsSubtasks:
    """A tool raised ``Suspend``: the host wakes the run when ``waiting_on`` is ready,
    and the next ``step`` runs those calls again."""

    calls: list[str]  # call ids
    waiting_on: list[Any]


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    """A host's budget check (``Agent(budget=...)``) refusing the next model call: the run
    fails with ``reason``; ``scope`` names the budget (stored on ``run_failed``)."""

    scope: str
    reason: str


@dataclass(frozen=True, slots=True)
class Failed:
    reason: str


@dataclass(frozen=True, slots=True)
class Cancelled:
    pass


Outcome = Finished | NeedsApproval | NeedsSubtasks | Failed | Cancelled


@dataclass(slots=True)
class StepResult:
    events: list[Event]
    outcome: Outcome | None


# -- state ---------------------------------------------------------------------------------


CallState = Literal["queued", "awaiting", "waiting", "done"]

#: The moves a call of a turn may make (``TurnCall`` methods make them, nothing else):
#: queued → done (ran, reused or refused) | awaiting (a person must decide) | waiting
#: (the tool suspended); awaiting → queued (approved) | done (rejected or not runnable);
#: waiting → queued (woken). A done call never moves again.
_MOVES: dict[str, frozenset[str]] = {
    "queued": frozenset({"done", "awaiting", "waiting"}),
    "awaiting": frozenset({"queued", "done"}),
    "waiting": frozenset({"queued"}),
    "done": frozenset(),
}


@dataclass(slots=True, kw_only=True)
class TurnCall:
    """One call of the current assistant turn while it is being resolved.

    Its ``state`` and the fields that belong to each state change only through the
    methods below, one per transition (``_MOVES``); the fields stay plain so the turn is
    stored as JSON between steps (a dataclass inside ``LoopState``: pydantic reads and
    writes it, while the loop sets its fields at plain attribute speed)."""

    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    state: CallState = "queued"
    reason: str | None = None  # why it is awaiting a person (see ``PendingCall.reason``)
    risk: str = "low"
    decision: Literal["approved", "rejected"] | None = None
    comment: str = ""
    content: str | None = None
    is_error: bool = False
    repaired: dict[str, str] = field(default_factory=dict)
    edited: bool = False  # an approver supplied the arguments
    waiting_on: list[Any] | None = None  # suspended (the tool raised ``Suspend``)
    attachments: list[Attachment] = field(default_factory=list)  # stored images (by ref)
    fp: str | None = None  # fingerprint of name + arguments (repeat guards)
    announced: bool = False  # its approval_requested event was emitted
    policy_reason: str | None = None  # why no person was needed (or why one is)

    def _move(self, to: CallState) -> None:
        if to not in _MOVES[self.state]:
            raise RuntimeError(f"call {self.call_id}: no move from {self.state} to {to}")
        self.state = to

    @property
    def undecided(self) -> bool:
        """Awaiting a person who has not decided yet."""
        return self.state == "awaiting" and self.decision is None

    def refuse(self, message: str) -> TurnCall:
        """queued/awaiting → done: not run; ``message`` is the error result the model reads."""
        self._move("done")
        self.content, self.is_error = message, True
        return self

    def resolve(self, content: str, is_error: bool) -> None:
        """queued → done: the tool ran (or the journal had its result)."""
        self._move("done")
        self.content, self.is_error, self.waiting_on = content, is_error, None

    def ask(self, reason: str, why: str | None = None) -> None:
        """queued → awaiting: a person decides (again, for a call whose earlier decision
        no longer holds); its ``approval_requested`` is still to be announced."""
        self._move("awaiting")
        self.reason, self.decision, self.announced = reason, None, False
        if why is not None:
            self.policy_reason = why

    def announce(self) -> bool:
        """Mark its ``approval_requested`` as emitted; False when it was already."""
        if not self.undecided or self.announced:
            return False
        self.announced = True
        return True

    def decide(self, approved: bool, comment: str, arguments: dict[str, Any] | None) -> None:
        """A person's decision (the call stays awaiting until the next step acts on it);
        ``arguments``: what the approver wants run instead (already validated)."""
        if not self.undecided:
            raise RuntimeError(f"call {self.call_id}: nothing to decide")
        if arguments is not None:
            self.arguments, self.edited = arguments, True
        self.decision = "approved" if approved else "rejected"
        self.comment = comment

    def release(self) -> None:
        """awaiting (approved) → queued: it runs in this step."""
        if self.decision != "approved":
            raise RuntimeError(f"call {self.call_id}: not approved")
        self._move("queued")

    def suspend(self, waiting_on: list[Any]) -> None:
        """queued → waiting: the tool raised ``Suspend``; it runs again when woken."""
        self._move("waiting")
        self.waiting_on = waiting_on

    def wake(self) -> None:
        """waiting → queued: ask the suspended tool again (``waiting_on`` stays, so it is
        not announced twice)."""
        self._move("queued")


class LoopState(BaseModel):
    model_config = ConfigDict(validate_assignment=False)

    task: str = ""
    run_id: str | None = None
    context: dict[str, Any] = Field(default_factory=dict)
    messages: list[Message] = Field(default_factory=list)
    iteration: int = 0
    status: Status = "running"
    started: bool = False
    usage: Usage = Field(default_factory=Usage)
    turn: list[TurnCall] | None = None  # the pending turn (calls not yet all resolved)
    last_round: list[str] = Field(default_factory=list)  # fingerprints of previous round
    reminded: list[str] = Field(default_factory=list)
    round_signatures: list[str] = Field(default_factory=list)
    no_progress: int = 0
    empty_replies: int = 0  # consecutive replies with neither text nor a call
    cut_calls: list[str] = Field(default_factory=list)  # ids cut off in the last reply
    cut_off: bool = False  # the last reply stopped at the token limit inside a call
    seen_call_ids: list[str] = Field(default_factory=list)
    best_answer: str | None = None
    final_answer: str | None = None
    decided_by: DecidedBy | None = None
    finish_reason: str | None = None
    failure_reason: str | None = None
    memory: dict[str, Any] = Field(default_factory=dict)  # the context policy's layer state

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoopState:
        return cls.model_validate(dict(data))

    @property
    def pending_approvals(self) -> list[PendingCall]:
        return [
            PendingCall(
                call_id=c.call_id,
                tool=c.name,
                arguments=c.arguments,
                risk=c.risk,
                reason=c.reason or "high_risk",
            )
            for c in self.turn or ()
            if c.undecided
        ]

    @property
    def outcome(self) -> Outcome | None:
        if self.status == "finished":
            return Finished(self.final_answer or "", self.decided_by or "model", self.finish_reason)
        if self.status == "failed":
            return Failed(self.failure_reason or "failed")
        if self.status == "cancelled":
            return Cancelled()
        if self.status == "waiting_approval":
            return NeedsApproval(self.pending_approvals)
        if self.status == "waiting_subtasks":
            waiting = [c for c in self.turn or () if c.state == "waiting"]
            keys = [key for c in waiting for key in c.waiting_on or ()]
            return NeedsSubtasks([c.call_id for c in waiting], list(dict.fromkeys(keys)))
        return None
