"""Celery tasks of the tickets: wake-ups only; the rows in PostgreSQL hold the truth."""

from __future__ import annotations

from celery import shared_task

from agentweb.tickets import mailbox


@shared_task(ignore_result=True)
def poll_mailbox() -> int:
    """Beat asks every 2 s; a poll runs when one is due and no other holds the mailbox."""
    return mailbox.poll_if_due().imported
