"""Celery tasks: interfaces like views. They take ids, claim work and call the engine."""

from __future__ import annotations

from celery import shared_task

from agentweb.runs import actions, engine


@shared_task(acks_late=True, ignore_result=True)
def run_agent(run_id: int) -> str | None:
    """Advance a run (new, resumed after a decision, or recovered after a crash)."""
    return engine.execute_run(run_id)


@shared_task(ignore_result=True)
def requeue_stale_runs() -> int:
    return len(actions.do_requeue_stale_runs())


@shared_task(ignore_result=True)
def expire_approvals() -> int:
    return actions.do_expire_approvals()
