"""What runs tell the rest of the installation, through hooks others register.

- ``on_step_stored(hook, types)``: after the transaction that stored a batch of a run's
  events commits, ``hook(step)`` gets a ``StoredStep``: the events and the facts about
  their run at that moment (observability makes spans and metrics of it). The store
  builds the step only when the batch has an event of one of the ``types`` some hook
  asked for.
- ``on_housekeeping(name, job)``: periodic clean-ups of tool modules (the workbench
  deletes old workspaces); beat's ``housekeeping`` task runs every job.

Django-free, importing nothing of the application: a tool module or observability
registers here without depending on how runs are stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agentweb.runtime import events as ev

log = logging.getLogger(__name__)

FINAL_EVENTS = {"run_finished": "succeeded", "run_failed": "failed", "run_cancelled": "cancelled"}


class StepFacts(Protocol):
    """How a step's reader asks for what the batch does not carry (read only when asked,
    after commit)."""

    def agent_name(self, agent_id: int) -> str: ...

    def approval_times(
        self, run_id: int, call_ids: list[str]
    ) -> dict[str, tuple[datetime, datetime | None]]: ...


@dataclass
class StoredStep:
    """One batch of a run's stored events and the facts about its run at that moment."""

    run_id: int
    agent_id: int
    agent_name: str | None  # None: not at hand when stored; ``agent()`` reads it
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
    state: Any = None  # the loop state after the step
    facts: StepFacts | None = None
    _approvals: dict[str, tuple[datetime, datetime | None]] | None = None
    _typed: list[ev.Event] | None = None

    def typed_events(self) -> list[ev.Event]:
        """The batch's events as the runtime's classes (``events.parse``), once; one that
        does not fit its type is left out (and logged), never an error for the run."""
        if self._typed is None:
            self._typed = []
            for kind, data in self.events:
                try:
                    self._typed.append(ev.parse(kind, data))
                except ev.EventShapeError as exc:
                    log.warning("run %s: a stored event does not fit: %s", self.run_id, exc)
        return self._typed

    def agent(self) -> str:
        if self.agent_name is None:
            self.agent_name = self.facts.agent_name(self.agent_id) if self.facts else ""
        return self.agent_name

    def approval_times(self) -> dict[str, tuple[datetime, datetime | None]]:
        """(requested_at, decided_at) of the approvals this batch decided, by call id."""
        calls = [d.get("call_id") for kind, d in self.events if kind == "approval_decided"]
        if not calls:
            return {}
        if self._approvals is None:
            wanted = [str(c) for c in calls if c]
            self._approvals = self.facts.approval_times(self.run_id, wanted) if self.facts else {}
        return self._approvals

    @property
    def final_status(self) -> str | None:
        for kind, _ in self.events:
            if kind in FINAL_EVENTS:
                return FINAL_EVENTS[kind]
        return None


StepHook = Callable[[StoredStep], None]
_step_hooks: list[tuple[StepHook, frozenset[str]]] = []
_wanted: set[str] = set()


def on_step_stored(hook: StepHook, types: Iterable[str]) -> None:
    """Call ``hook(step)`` after commit for every stored batch with an event of ``types``
    (the step carries the batch's events of every type)."""
    if any(h is hook for h, _ in _step_hooks):
        return
    kinds = frozenset(types)
    _step_hooks.append((hook, kinds))
    _wanted.update(kinds)


def wants(types: Iterable[str]) -> bool:
    """Whether a batch with events of ``types`` is to be told to a hook."""
    return not _wanted.isdisjoint(types)


def step_stored(step: StoredStep) -> None:
    """Hand ``step`` to the hooks whose types it has; a failing hook never breaks a run."""
    kinds = {kind for kind, _ in step.events}
    for hook, types in list(_step_hooks):
        if types.isdisjoint(kinds):
            continue
        try:
            hook(step)
        except Exception:
            log.warning("run %s: a step hook (%r) failed", step.run_id, hook, exc_info=True)


Job = Callable[[], int]
_jobs: dict[str, Job] = {}


def on_housekeeping(name: str, job: Job) -> None:
    """Run ``job()`` (it returns how many things it removed) at every housekeeping."""
    _jobs[name] = job


def housekeeping() -> dict[str, int]:
    """Every registered clean-up, each on its own (one that fails is logged and skipped)."""
    done: dict[str, int] = {}
    for name, job in list(_jobs.items()):
        try:
            done[name] = int(job())
        except Exception:
            log.warning("housekeeping %s failed", name, exc_info=True)
    return done
