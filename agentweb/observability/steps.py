"""What a stored batch of events tells traces and metrics.

``record`` is a step hook (``agentweb.runs.hooks.on_step_stored``; the runs app registers
it as it starts): the store hands it each batch of a run's events, with the facts about
the run at that moment, after the transaction that stored them commits (a rolled-back
step leaves no trace), in whichever process stored them: the worker for steps, the web
process for a decision or a cancel, beat for an expiry. Nothing here reads the database.
"""

from __future__ import annotations

import dataclasses
import logging

from agentweb.observability import metrics, tracing
from agentweb.runs.hooks import FINAL_EVENTS, StoredStep

log = logging.getLogger(__name__)

#: The event types spans and metrics are made of.
INTERESTING = {"model_called", "tool_call_started", "tool_call_finished", "approval_decided"}
INTERESTING |= set(FINAL_EVENTS) | {"run_started"}


def record(step: StoredStep) -> None:
    """Count the step's metrics and export its spans (when tracing is on)."""
    step = dataclasses.replace(step, events=[e for e in step.events if e[0] in INTERESTING])
    try:
        metrics.record(step)
    except Exception:  # metrics never break a run
        log.warning("run %s: could not count the step's metrics", step.run_id, exc_info=True)
    if tracing.enabled():
        try:
            tracing.record(step)
        except Exception:
            log.warning("run %s: could not export the step's spans", step.run_id, exc_info=True)
