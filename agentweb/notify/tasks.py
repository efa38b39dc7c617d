"""Celery tasks of the approval channels: beat's sweep for escalations and reminders."""

from __future__ import annotations

from celery import shared_task

from agentweb.notify import actions
from agentweb.outbox import lanes


@shared_task(ignore_result=True)
def escalate_and_remind() -> int:
    return actions.do_escalate_and_remind()


@shared_task(ignore_result=True)
def announce(approval_id: int) -> None:
    """A request stored outside a worker (rare): announce it on this worker's lane."""
    lanes.submit(actions.ANNOUNCE_LANE, approval_id, actions.announce_in_lane)
