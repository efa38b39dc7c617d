"""Wake-up calls to the workers: the one way a run is enqueued.

A Celery message only wakes a worker; PostgreSQL holds the run. So a message that cannot
be sent (Redis away, restarting, refusing) never fails what stored the run: the run is
marked due at once (``lease_expires_at`` now) and beat's sweep, which re-enqueues every
queued or running run whose lease expired, sends it again when the broker is back.

Messages go by task name, so nothing here imports the tasks (which import the engine).
``enqueue_on_commit`` sends after the transaction that stored the run commits, as a
*robust* on-commit callback: a failure is logged and the callbacks after it still run.

A run that is under way goes before one that has yet to start. kombu's Redis transport
keeps a list per priority step of a queue, and a worker pops the lists in order; a new
run's wake-up goes to a later list (``NEW``) than every other message (``UNDER_WAY``: a
run resumed by a person's decision, children their parent waits for, a parent whose
children ended, a re-enqueue). So an approver's decision is acted on as soon as a worker
thread is free, not after a burst of new tickets queued before it.
"""

from __future__ import annotations

import functools
import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentweb.celery import app
from agentweb.runs.models import Run

log = logging.getLogger(__name__)

#: The task that advances a run (``agentweb.runs.tasks.run_agent``).
RUN_AGENT = "agentweb.runs.tasks.run_agent"
#: A queued run's ``lease_expires_at`` is the time by which a worker must have claimed it;
#: past it the sweep enqueues it again (a lost message costs only this delay).
QUEUE_GRACE = timedelta(seconds=60)

#: Message priorities (kombu's Redis transport: the lower, the sooner; its steps are 0, 3,
#: 6 and 9). Every message but a new run's wake-up is ``UNDER_WAY``.
UNDER_WAY = 0
NEW = 6


def send(task: str, *args: Any, priority: int = UNDER_WAY) -> None:
    """Send one message to the installation's queue; raises what the broker raises."""
    from agentweb import broker  # kombu's Redis transport: imported when first sending

    broker.install_client_reuse()  # idempotent; the web's sends need it too
    # No task of ours keeps a result. Said here, Celery does not make the sending
    # thread its result backend and reply address (a thread's own, made on its first
    # send: the web sends from a new thread per request, and that doubled the cost of a
    # run's wake-up), nor an AsyncResult that would make them too.
    app.send_task(
        task,
        args=list(args),
        ignore_result=True,
        reply_to=app.oid,
        result_cls=_Sent,
        priority=priority,
    )


class _Sent:
    """What ``send_task`` returns here: the message's task id, nothing to wait on."""

    __slots__ = ("id", "ignored")

    def __init__(self, task_id: str) -> None:
        self.id = task_id
        self.ignored = True


def enqueue(run_id: int, task: str = RUN_AGENT, *, new: bool = False) -> bool:
    """Wake a worker for ``run_id`` now (``new``: a run that has yet to start, behind the
    runs under way). Never raises for the broker: on a failure the run is due at once for
    the sweep, and this returns False."""
    try:
        send(task, run_id, priority=NEW if new else UNDER_WAY)
    except Exception as exc:  # kombu's OperationalError, a refused or reset connection ...
        log.warning("could not enqueue run %s (%s); beat's sweep will send it", run_id, exc)
        Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).update(
            lease_expires_at=timezone.now()
        )
        return False
    return True


def enqueue_on_commit(run_id: int, task: str = RUN_AGENT, *, new: bool = False) -> None:
    """``enqueue`` once the current transaction commits (at once outside of one)."""
    transaction.on_commit(functools.partial(enqueue, run_id, task, new=new), robust=True)
