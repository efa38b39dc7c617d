"""Celery tasks: interfaces like views. They take ids, claim work and call the engine."""

from __future__ import annotations

import logging

from celery import shared_task, signals
from django.db import connections

from agentweb import celery as celery_app
from agentweb.observability.logs import run_scope
from agentweb.runs import actions, engine, hooks, lifecycle
from agentweb.runs.faults import crash_point

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def run_agent(run_id: int) -> str | None:
    """Advance a run (new, resumed after a decision, or recovered after a crash)."""
    with run_scope(run_id) as fields:

        def claimed(trace_id: str) -> None:  # the claim's UPDATE returned the trace id
            if trace_id:
                fields["trace_id"] = trace_id
            log.info("run %s: worker picked it up", run_id)

        crash_point("message_received")
        status = engine.execute_run(run_id, on_claimed=claimed)
        if status is None:
            log.info("run %s: not ours (taken by another worker, or not runnable)", run_id)
        else:
            log.info("run %s: %s", run_id, status, extra={"status": status})
        return status


@shared_task(ignore_result=True)
def requeue_stale_runs() -> int:
    """The sweep (beat, every 2 s): orphaned children, messages a Redis restart lost,
    leases that expired."""
    lifecycle.cancel_orphans()
    lifecycle.due_now_if_messages_lost(celery_app.broker_queue_length())
    return len(actions.do_requeue_stale_runs())


@shared_task(ignore_result=True)
def expire_approvals() -> int:
    return actions.do_expire_approvals()


@shared_task(ignore_result=True)
def housekeeping() -> int:
    """The clean-ups tool modules registered (``hooks.on_housekeeping``: the workbench
    deletes workspaces unused for AGENTWEB_WORKSPACE_RETENTION_DAYS); how much they removed."""
    done = hooks.housekeeping()
    if done:
        log.info("housekeeping: %s", done, extra={"removed": done})
    return sum(done.values())


@signals.worker_ready.connect
def _sweep_on_start(**_: object) -> None:
    """A worker that starts (often one that replaces a killed one) re-enqueues the runs
    whose lease expired at once instead of at beat's next tick."""
    try:
        actions.do_requeue_stale_runs()
    except Exception:  # the database is away: beat's sweep catches up
        log.warning("start-up sweep failed", exc_info=True)
    finally:
        # This thread runs no task that would close it: it would stay open all along.
        connections.close_all()
