"""Celery tasks of the approval channels: beat's sweep for escalations and reminders."""

from __future__ import annotations

from celery import shared_task

from agentweb.notify import actions


@shared_task(ignore_result=True)
def escalate_and_remind() -> int:
    return actions.do_escalate_and_remind()
