"""Celery tasks of the outbox: wake-ups only; the row in PostgreSQL is the truth."""

from __future__ import annotations

from celery import shared_task

from agentweb.outbox import actions, lanes


@shared_task(ignore_result=True)
def deliver(delivery_pk: int, lane: str) -> None:
    """Hand the delivery to its lane in this worker and return at once: the attempt runs
    on the lane's thread, never on the worker's (see ``agentweb.outbox.lanes``)."""
    lanes.submit(lane, delivery_pk, actions.attempt_in_lane)


@shared_task(ignore_result=True)
def sweep_deliveries() -> int:
    return actions.do_sweep_deliveries()
