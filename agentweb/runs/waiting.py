"""Steps that wait to be stored with the next one (the engine's ``may_wait``).

A step that only read, quickly, changed nothing: a worker that dies before it is stored
leaves nothing behind but a model call and reads to do again. So it may wait and be
written by the next stored step's transaction, before that step's own events, each
waiting step with its own append (its spans end when it ended). A fast model's run then
costs one transaction instead of one per step; a slower model's steps (a real
provider's) are stored at once, and a person watching a fast run sees it move at least
every ``STEP_WAIT_MAX_MS``.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from django.conf import settings

from agentweb.runs.journal import DbJournal
from agentweb.runtime import events as ev
from agentweb.runtime.state import LoopState


class Waiting(NamedTuple):
    """A step done but not stored yet: its events (priced), when it ended, the tools its
    replies called."""

    events: list[ev.Event]
    ended_ns: int
    calls: list[str]


#: A step waits to be stored with the next one only when its model answered within this
#: many milliseconds (a real provider takes longer: its steps are stored at once) ...
STEP_WAIT_BELOW_MS = 50.0
#: ... and at most this many steps wait, for at most this long after the first one ended,
#: so a person watching a fast run sees it move at least this often.
STEP_WAIT_MAX_STEPS = 4
STEP_WAIT_MAX_MS = 100.0
#: The events a step that waits may hold: a reply, its quick reads, the context it saw.
_MAY_WAIT = (ev.RunStarted, ev.ModelCalled, ev.ToolCallStarted, ev.ToolCallFinished)


def may_wait(
    agent: Any,
    state: LoopState,
    events: list[ev.Event],
    outcome: Any,
    journal: DbJournal,
    waiting: list[Waiting],
) -> bool:
    """Whether a step may be stored with the next one instead of now: the run goes on,
    nothing is planned for the next step (a call that is not a quick read is run only
    after the reply that asked for it is stored), its calls were quick reads whose
    records are written with a step anyway (``DbJournal``: no record of their own), its
    model answered quickly, no budget applies to the run (each check before a model call
    must see every call made: ``budgets.check``), and not too many steps wait already.
    ``AGENTWEB_SYNC_STEPS`` stores every step at once."""
    if outcome is not None or state.turn is not None or settings.AGENTWEB_SYNC_STEPS:
        return False
    if len(waiting) >= STEP_WAIT_MAX_STEPS:
        return False
    if waiting and (time.time_ns() - waiting[0].ended_ns) / 1e6 >= STEP_WAIT_MAX_MS:
        return False
    replies = [e for e in events if isinstance(e, ev.ModelCalled)]
    if not replies or any(r.latency_ms >= STEP_WAIT_BELOW_MS for r in replies):
        return False
    if not all(type(e) in _MAY_WAIT for e in events):
        return False
    deferred = journal.deferred()
    if any(e.call_id not in deferred for e in events if isinstance(e, ev.ToolCallFinished)):
        return False
    budget = agent.budget
    if budget is None:
        return True
    limited = getattr(budget, "limited", None)
    return callable(limited) and not limited()
