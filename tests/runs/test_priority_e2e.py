"""A person's decision is acted on before runs that have yet to start, with a real Celery
worker on a real Redis: the resumed run's wake-up was sent after four new runs', and the
worker (one thread) still takes it first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentweb.celery import app
from agentweb.runs import actions, queue
from agentweb.runs.models import Approval, Run, RunEvent
from tests.conftest import Proc, start_worker, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

QUEUE = f"priority-{os.getpid()}"
SUBJECT = "Where is my order?"  # the demo plays: order, tracking, a trace, then the reply


@pytest.fixture
def env(stack_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    # Runs this process starts or resumes go to this test's workers.
    monkeypatch.setattr(
        queue,
        "send",
        lambda task, *args, **kw: app.send_task(task, args=list(args), queue=QUEUE, **kw),
    )
    return {**stack_env, "AGENTWEB_QUEUE": QUEUE, "AGENTWEB_MODEL": "demo"}


def test_a_decision_goes_before_runs_queued_earlier(
    demo: dict, env: dict[str, str], procs: list[Proc], tmp_path: Path
) -> None:
    from agentweb.tickets.models import Ticket

    first = start_worker(env, tmp_path, "priority-first", 1)
    procs.append(first)
    ticket = Ticket.objects.get(subject=SUBJECT)
    paused = actions.do_create_run(user=demo["operator"], task="", ticket_id=ticket.pk)
    approval = wait_for(
        lambda: Approval.objects.filter(run=paused, status="pending").first(), timeout=60
    )
    first.stop()  # no worker: what follows waits in the queue

    new = [
        actions.do_create_run(user=demo["operator"], task=f"Where is order A100{i}?")
        for i in range(1, 5)
    ]
    actions.do_decide_approval(approval_id=approval.pk, user=demo["approver"], decision="approve")
    assert Run.objects.get(pk=paused.pk).status == Run.Status.QUEUED

    procs.append(start_worker(env, tmp_path, "priority-second", 1))
    wait_for(
        lambda: (
            not Run.objects.filter(pk__in=[paused.pk, *[r.pk for r in new]])
            .filter(status__in=[Run.Status.QUEUED, Run.Status.RUNNING])
            .exists()
        ),
        timeout=120,
    )
    acted = RunEvent.objects.get(run=paused, type="tool_call_started", data__tool=approval.tool).at
    starts = sorted(Run.objects.get(pk=r.pk).started_at for r in new)
    assert None not in starts
    # One worker thread: had it taken the messages in the order sent, the four new runs
    # would all have started before the approved call ran.
    assert acted < starts[0], (acted, starts)
