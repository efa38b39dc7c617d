"""Celery tasks: interfaces like views. They take ids, claim work and call the engine."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from agentweb.observability.logs import run_scope
from agentweb.runs import actions, delegation, engine
from agentweb.runs.models import Run

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def run_agent(run_id: int) -> str | None:
    """Advance a run (new, resumed after a decision, or recovered after a crash)."""
    trace_id = Run.objects.filter(pk=run_id).values_list("trace_id", flat=True).first()
    with run_scope(run_id, trace_id or ""):
        log.info("run %s: worker picked it up", run_id)
        status = engine.execute_run(run_id)
        if status is None:
            log.info("run %s: not ours (taken by another worker, or not runnable)", run_id)
        else:
            log.info("run %s: %s", run_id, status, extra={"status": status})
        return status


@shared_task(ignore_result=True)
def requeue_stale_runs() -> int:
    delegation.cancel_orphans()
    _queued_runs_without_a_message()
    return len(actions.do_requeue_stale_runs())


def _queued_runs_without_a_message() -> None:
    """A Redis that restarted empty lost the messages of queued runs: when the queue is
    empty, queued runs older than a few seconds are due now, not after the queue grace
    (a run that does have a message is claimed once; the extra message is a no-op)."""
    from datetime import timedelta

    from django.utils import timezone

    from agentweb.celery import broker_queue_length
    from agentweb.runs.models import Run

    if broker_queue_length() not in (0, None):
        return
    now = timezone.now()
    Run.objects.filter(
        status=Run.Status.QUEUED,
        created_at__lt=now - timedelta(seconds=10),
        lease_expires_at__gt=now,
    ).update(lease_expires_at=now)


@shared_task(ignore_result=True)
def expire_approvals() -> int:
    return actions.do_expire_approvals()


@shared_task(ignore_result=True)
def clean_workspaces() -> int:
    """Delete run workspaces (tools.workbench) unused for AGENTWEB_WORKSPACE_RETENTION_DAYS."""
    from tools.workbench import workspace

    return len(workspace.cleanup(settings.AGENTWEB_WORKSPACE_RETENTION_DAYS))
