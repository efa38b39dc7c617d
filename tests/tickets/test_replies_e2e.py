"""Replies out with real worker processes (DESIGN §11): a worker killed (``os._exit``, as
kill -9) between the approval and the delivery never sends two different messages, and a
run never waits on a delivery (an SMTP server that holds the mail)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentweb.celery import app
from agentweb.outbox.config import parse_smtp_url
from agentweb.outbox.models import Delivery
from agentweb.runs import actions as run_actions
from agentweb.runs import faults, queue
from agentweb.runs.models import Approval, Run
from agentweb.tickets.models import Message, Ticket
from tests.conftest import Proc, start_beat, start_worker, wait_for
from tests.fakes.smtp_server import FakeSmtpServer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

QUEUE = f"replies-{os.getpid()}"
SUBJECT = "Where is my order?"  # the demo plays: order, tracking, a trace, then the reply


@pytest.fixture
def smtp(settings: Any) -> Iterator[FakeSmtpServer]:
    with FakeSmtpServer() as server:
        settings.AGENTWEB_SMTP = parse_smtp_url(server.url)
        settings.AGENTWEB_MAIL_FROM = "support@shop.example"
        settings.AGENTWEB_DELIVERY_TIMEOUT_SECONDS = 1
        yield server


@pytest.fixture
def env(
    stack_env: dict[str, str], smtp: FakeSmtpServer, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    # Runs this process starts or resumes go to this test's workers.
    monkeypatch.setattr(
        queue,
        "send",
        lambda task, *args, **kw: app.send_task(task, args=list(args), queue=QUEUE, **kw),
    )
    return {
        **stack_env,
        "AGENTWEB_QUEUE": QUEUE,
        "AGENTWEB_MODEL": "demo",
        "AGENTWEB_LEASE_SECONDS": "2",
        "AGENTWEB_SMTP_URL": smtp.url,
        "AGENTWEB_MAIL_FROM": "support@shop.example",
        "AGENTWEB_DELIVERY_TIMEOUT_SECONDS": "1",
    }


def email_ticket() -> Ticket:
    ticket = Ticket.objects.get(subject=SUBJECT)
    Ticket.objects.filter(pk=ticket.pk).update(
        source="email",
        external_id="<where@customer.example>",
        requester_email="c3@customer.example",
    )
    Message.objects.filter(ticket=ticket).update(external_id="<where@customer.example>")
    return Ticket.objects.get(pk=ticket.pk)


def replies() -> Any:
    """The deliveries of replies (approvers may be mailed too, about the approval)."""
    return Delivery.objects.filter(about_type="ticketmessage")


def pending(run: Run) -> Approval | None:
    return Approval.objects.filter(run=run, status="pending").first()


def status(run: Run) -> str:
    return Run.objects.get(pk=run.pk).status


def test_a_worker_killed_after_the_reply_was_written_sends_one_message(
    demo: dict, env: dict[str, str], smtp: FakeSmtpServer, procs: list[Proc], tmp_path: Path
) -> None:
    ticket = email_ticket()
    crash = {**env, "AGENTWEB_TEST_CRASH_AT": "tool_returned:send_customer_reply"}
    first = start_worker(crash, tmp_path, "replies-crash", 2)
    procs += [first, start_beat(env, tmp_path)]
    run = run_actions.do_create_run(user=demo["operator"], task="", ticket_id=ticket.pk)
    approval = wait_for(lambda: pending(run), timeout=60)
    assert approval.tool == "send_customer_reply"
    run_actions.do_decide_approval(
        approval_id=approval.pk, user=demo["approver"], decision="approve"
    )
    wait_for(lambda: first.proc.poll() is not None, timeout=60)
    assert first.proc.returncode == faults.EXIT_CODE  # died right after the tool returned
    [written] = Message.objects.filter(ticket=ticket, direction="out")  # committed by the tool

    procs.append(start_worker(env, tmp_path, "replies-after", 2))
    # The call may or may not have happened: a person is asked before it runs again.
    again = wait_for(lambda: pending(run), timeout=60)
    assert again.tool == "send_customer_reply" and again.reason == "unknown_outcome"
    run_actions.do_decide_approval(approval_id=again.pk, user=demo["approver"], decision="approve")
    wait_for(lambda: status(run) == "succeeded", timeout=60)
    wait_for(lambda: replies().filter(state="sent").exists(), timeout=60)
    assert list(Message.objects.filter(ticket=ticket, direction="out")) == [written]
    [delivery] = replies()
    assert delivery.delivery_id == written.delivery_id
    smtp.wait_for(1)
    mails = smtp.to("c3@customer.example")
    assert mails and {m.message_id for m in mails} == {written.external_id}
    assert len({m.data for m in mails}) == 1  # a re-send is the same bytes, never another text


def test_a_run_never_waits_on_a_delivery(
    demo: dict, env: dict[str, str], smtp: FakeSmtpServer, procs: list[Proc], tmp_path: Path
) -> None:
    ticket = email_ticket()
    procs += [start_worker(env, tmp_path, "replies-worker", 2), start_beat(env, tmp_path)]
    smtp.hang()  # the server takes mail and never answers
    run = run_actions.do_create_run(user=demo["operator"], task="", ticket_id=ticket.pk)
    approval = wait_for(lambda: pending(run), timeout=60)
    run_actions.do_decide_approval(
        approval_id=approval.pk, user=demo["approver"], decision="approve"
    )
    wait_for(lambda: status(run) == "succeeded", timeout=30)
    assert smtp.messages == []
    assert replies().get().state == "queued"  # still trying, the run is done
    smtp.release()
    wait_for(lambda: replies().get().state == "sent", timeout=60)
    [mail] = [m for m in smtp.wait_for(1) if m.envelope_to == ["c3@customer.example"]]
    assert mail.message["Subject"] == f"Re: {SUBJECT} [#{ticket.pk}]"
    assert "Reply" in (Run.objects.get(pk=run.pk).final_answer or "")
