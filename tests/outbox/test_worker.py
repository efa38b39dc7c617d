"""The outbox with a real Celery worker and beat: sent after commit, a lost wake-up swept
up, kill -9 mid-delivery re-sends the same bytes, a channel that hangs holds up nobody."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentweb.celery import app
from agentweb.outbox import actions as outbox
from agentweb.outbox.models import Delivery
from agentweb.runs import queue
from tests.conftest import Proc, start_beat, start_worker, wait_for
from tests.fakes.receiver import Receiver
from tests.fakes.smtp_server import FakeSmtpServer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

QUEUE = f"outbox-{os.getpid()}"


class Stack:
    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env, self.tmp = env, tmp
        self.worker: Proc | None = None
        self.beat: Proc | None = None
        self.n = 0

    def start_worker(self, concurrency: int = 2) -> Proc:
        self.n += 1
        self.worker = start_worker(self.env, self.tmp, f"outbox-worker{self.n}", concurrency)
        return self.worker

    def start_beat(self) -> Proc:
        self.beat = start_beat(self.env, self.tmp)
        return self.beat

    def stop(self) -> None:
        for proc in (self.worker, self.beat):
            if proc is not None:
                proc.stop()


@pytest.fixture
def smtp() -> Iterator[FakeSmtpServer]:
    with FakeSmtpServer() as server:
        yield server


@pytest.fixture
def stack(
    stack_env: dict[str, str],
    tmp_path: Path,
    smtp: FakeSmtpServer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Stack]:
    env = {
        **stack_env,
        "AGENTWEB_QUEUE": QUEUE,
        "AGENTWEB_SMTP_URL": smtp.url,
        "AGENTWEB_MAIL_FROM": "agentweb@example.test",
        "AGENTWEB_DELIVERY_TIMEOUT_SECONDS": "1",
    }
    # Wake-ups sent from this process go to this stack's worker.
    monkeypatch.setattr(
        queue,
        "send",
        lambda task, *args, **kw: app.send_task(task, args=list(args), queue=QUEUE, **kw),
    )
    settings.AGENTWEB_MAIL_FROM = "agentweb@example.test"
    settings.AGENTWEB_DELIVERY_TIMEOUT_SECONDS = 1
    running = Stack(env, tmp_path)
    yield running
    running.stop()


def state_of(delivery: Delivery) -> str:
    return Delivery.objects.get(pk=delivery.pk).state


def test_it_is_sent_after_commit(stack: Stack, smtp: FakeSmtpServer) -> None:
    stack.start_worker()
    with Receiver(secret="s") as hooks:
        mail = outbox.do_queue_email(to="a@example.test", subject="s", text="t")
        hook = outbox.do_queue_webhook(url=hooks.url(), secret="s", payload={"n": 1})
        smtp.wait_for(1, timeout=15)
        hooks.wait_for(1, timeout=15)
        wait_for(lambda: state_of(mail) == state_of(hook) == "sent", timeout=10)


def test_a_lost_wake_up_is_swept_up(
    stack: Stack, smtp: FakeSmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox, "dispatch", lambda pk, lane: None)  # the message is lost
    stack.start_worker()
    stack.start_beat()
    d = outbox.do_queue_email(to="a@example.test", subject="s", text="t")
    Delivery.objects.filter(pk=d.pk).update(dispatched_at=None)  # as after a broker error
    smtp.wait_for(1, timeout=20)
    wait_for(lambda: state_of(d) == "sent", timeout=10)


def test_retries_happen_without_anyone_asking(stack: Stack, smtp: FakeSmtpServer) -> None:
    smtp.refuse(1)
    stack.start_worker()
    stack.start_beat()
    d = outbox.do_queue_email(to="a@example.test", subject="s", text="t")
    smtp.wait_for(1, timeout=30)
    row = Delivery.objects.get(pk=d.pk)
    assert row.attempts == 2 and "451" in row.last_error


def test_kill_9_mid_delivery_sends_the_same_message_again(
    stack: Stack, smtp: FakeSmtpServer
) -> None:
    smtp.hang()
    worker = stack.start_worker()
    stack.start_beat()
    d = outbox.do_queue_email(to="a@example.test", subject="Refund", text="the one text")
    wait_for(lambda: smtp.attempts == 1, timeout=15)  # the whole message is in, no answer yet
    worker.kill9()
    smtp.release()
    stack.start_worker()
    # the lease (10 x the 1 s timeout + 5 s) runs out, the sweep tries again
    [accepted] = smtp.wait_for(1, timeout=40)
    wait_for(lambda: state_of(d) == "sent", timeout=10)
    first, second = smtp.seen
    assert first.data == second.data == accepted.data  # byte for byte, Message-ID and Date too
    assert accepted.message_id == outbox.message_id(d.delivery_id)
    assert Delivery.objects.get(pk=d.pk).attempts == 2
    time.sleep(3)
    assert len(smtp.seen) == 2  # and nothing more


def test_kill_9_mid_webhook_posts_the_same_body_again(stack: Stack) -> None:
    with Receiver(secret="s") as hooks:
        hooks.hang(1)
        worker = stack.start_worker()
        stack.start_beat()
        d = outbox.do_queue_webhook(url=hooks.url(), secret="s", payload={"event": "x", "n": 7})
        wait_for(lambda: len(hooks.hits) == 1, timeout=15)
        worker.kill9()
        hooks.release()
        stack.start_worker()
        hooks.wait_for(1, timeout=40)
        wait_for(lambda: state_of(d) == "sent", timeout=10)
        assert {h.body for h in hooks.hits} == {Delivery.objects.get(pk=d.pk).body.encode()}
        assert {h.delivery_id for h in hooks.hits} == {d.delivery_id}


def test_a_mail_server_that_hangs_holds_up_no_other_channel(
    stack: Stack, smtp: FakeSmtpServer
) -> None:
    smtp.hang()
    stack.env["AGENTWEB_DELIVERY_TIMEOUT_SECONDS"] = "60"  # a mail waits a minute for "250"
    stack.start_worker(concurrency=2)  # fewer Celery threads than hanging mails
    with Receiver(secret="s") as hooks:
        mails = [
            outbox.do_queue_email(to=f"p{i}@example.test", subject="s", text="t") for i in range(6)
        ]
        wait_for(lambda: smtp.attempts >= 2, timeout=15)  # both Celery threads' worth
        outbox.do_queue_webhook(url=hooks.url(), secret="s", payload={"n": 1})
        hooks.wait_for(1, timeout=8)
        # it went through while the mail server still holds every mail
        assert smtp.messages == [] and all(state_of(m) == "queued" for m in mails)
        smtp.release()
