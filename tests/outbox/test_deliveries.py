"""The outbox against real peers on loopback: aiosmtpd for mail, an HTTP receiver that
checks our signatures and fails on purpose. Attempts are made in the test's thread
(``do_attempt_delivery``); the worker's side is in test_worker.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from agentweb.outbox import actions as outbox
from agentweb.outbox import transports
from agentweb.outbox.config import parse_smtp_url
from agentweb.outbox.models import Delivery
from tests.fakes.receiver import Receiver
from tests.fakes.smtp_server import FakeSmtpServer
from tests.fakes.tls import make_ca

pytestmark = pytest.mark.django_db


def due(delivery: Delivery) -> None:
    """Skip the wait before the next attempt."""
    Delivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())


def fresh(delivery: Delivery) -> Delivery:
    return Delivery.objects.get(pk=delivery.pk)


def mail(**kwargs: Any) -> Delivery:
    args = {"to": "Alice <alice@example.test>", "subject": "Refund of 25.00", "text": "Hello"}
    return outbox.do_queue_email(**{**args, **kwargs})


# --- mail ------------------------------------------------------------------------------


def test_it_mails_the_stored_bytes_with_a_stable_message_id(smtp: FakeSmtpServer) -> None:
    d = mail(text="Grüße, Ünïcode ✓\n\nline two", delivery_id="msg-41", about=("thing", 41))
    assert outbox.do_attempt_delivery(d.pk) == "sent"
    [got] = smtp.wait_for(1)
    assert got.envelope_to == ["alice@example.test"]
    assert got.envelope_from == "agentweb@example.test"
    assert got.message_id == outbox.message_id("msg-41") == "<msg-41@example.test>"
    assert got.message["Subject"] == "Refund of 25.00"
    assert got.text().rstrip() == "Grüße, Ünïcode ✓\n\nline two"
    assert got.data.rstrip(b"\r\n") == fresh(d).body.encode().rstrip(b"\r\n")
    row = fresh(d)
    assert (row.state, row.attempts, row.sent_at is not None) == ("sent", 1, True)
    assert row.as_notification()["to"] == "alice@example.test"
    assert [x.pk for x in outbox.deliveries_about("thing", 41)] == [d.pk]


def test_it_retries_a_server_that_refuses_then_accepts(smtp: FakeSmtpServer) -> None:
    smtp.refuse(2)
    d = mail()
    before = timezone.now()
    assert outbox.do_attempt_delivery(d.pk) == "queued"
    row = fresh(d)
    assert "451" in row.last_error and row.attempts == 1
    # first retry within 10 s (5 s +-20%; beat's sweep looks every 2 s)
    assert timedelta(seconds=3) < row.next_attempt_at - before < timedelta(seconds=7)
    assert outbox.do_attempt_delivery(d.pk) is None  # not due yet: nothing is sent
    due(d)
    assert outbox.do_attempt_delivery(d.pk) == "queued"
    assert fresh(d).next_attempt_at - timezone.now() > timedelta(seconds=7)  # backing off
    due(d)
    assert outbox.do_attempt_delivery(d.pk) == "sent"
    assert len(smtp.wait_for(1)) == 1 and smtp.attempts == 3
    assert fresh(d).attempts == 3


def test_a_permanent_refusal_fails_at_once(smtp: FakeSmtpServer) -> None:
    smtp.refuse(1, "550 5.1.1 No such user")
    d = mail()
    assert outbox.do_attempt_delivery(d.pk) == "failed"
    row = fresh(d)
    assert row.state == "failed" and "550" in row.last_error and "No such user" in row.last_error
    assert row.as_notification()["error"] == row.last_error


def test_retries_end_after_the_retry_window(smtp: FakeSmtpServer) -> None:
    smtp.refuse(5)
    d = mail()
    Delivery.objects.filter(pk=d.pk).update(give_up_at=timezone.now() - timedelta(seconds=1))
    assert outbox.do_attempt_delivery(d.pk) == "failed"
    assert fresh(d).last_error.startswith("gave up after 1 attempts")


def test_mail_without_a_server_stays_queued_and_says_why(settings: Any) -> None:
    settings.AGENTWEB_SMTP = None
    d = mail()
    assert outbox.do_attempt_delivery(d.pk) == "queued"
    assert "AGENTWEB_SMTP_URL is not set" in fresh(d).last_error


def test_a_server_that_is_down_is_retried(settings: Any, fast: None) -> None:
    server = FakeSmtpServer()
    settings.AGENTWEB_SMTP = parse_smtp_url(server.url)
    server.close()
    d = mail()
    assert outbox.do_attempt_delivery(d.pk) == "queued"
    assert "ConnectionRefusedError" in fresh(d).last_error


def test_starttls_with_a_login_checks_the_certificate(
    settings: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = make_ca(tmp_path / "ca")
    with FakeSmtpServer(ca=ca, auth=("mailer", "p@ss word")) as server:
        url = f"smtp://mailer:p%40ss%20word@127.0.0.1:{server.port}"
        settings.AGENTWEB_SMTP = parse_smtp_url(url)
        d = mail()
        # not trusted yet: the test CA is not among the system's
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        assert outbox.do_attempt_delivery(d.pk) == "queued"
        assert "certificate not trusted" in fresh(d).last_error
        assert server.messages == []
        monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_file))
        due(d)
        assert outbox.do_attempt_delivery(d.pk) == "sent"
        [got] = server.wait_for(1)
        assert got.tls and got.login == "mailer"


def test_smtps_is_tls_from_the_first_byte(
    settings: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = make_ca(tmp_path / "ca")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_file))
    with FakeSmtpServer(ca=ca, implicit_tls=True) as server:
        settings.AGENTWEB_SMTP = parse_smtp_url(server.url)
        assert server.url.startswith("smtps://")
        assert outbox.do_attempt_delivery(mail().pk) == "sent"
        assert server.wait_for(1)[0].tls


def test_no_password_in_clear_when_starttls_is_not_offered(settings: Any, tmp_path: Any) -> None:
    with FakeSmtpServer(ca=make_ca(tmp_path / "ca"), offer_starttls=False) as server:
        settings.AGENTWEB_SMTP = parse_smtp_url(f"smtp://u:p@127.0.0.1:{server.port}")
        d = mail()
        assert outbox.do_attempt_delivery(d.pk) == "queued"
        assert "does not offer STARTTLS" in fresh(d).last_error
        assert server.attempts == 0


def test_a_thread_keeps_its_mail_session_and_makes_a_new_one_when_it_is_gone(
    settings: Any,
) -> None:
    with FakeSmtpServer(idle_timeout=0.5) as server:
        settings.AGENTWEB_SMTP = parse_smtp_url(server.url)
        transports._drop_smtp()
        for _ in range(3):
            assert outbox.do_attempt_delivery(mail().pk) == "sent"
        assert server.greetings == 1 and len(server.messages) == 3  # one session, three mails
        time.sleep(1.0)  # the server closes the idle session
        assert outbox.do_attempt_delivery(mail().pk) == "sent"
        assert server.greetings == 2 and len(server.messages) == 4
    transports._drop_smtp()


def test_header_injection_through_a_subject_is_flattened(smtp: FakeSmtpServer) -> None:
    d = mail(subject="Hi\r\nBcc: victim@example.test\r\n\r\nbody")
    outbox.do_attempt_delivery(d.pk)
    [got] = smtp.wait_for(1)
    assert got.envelope_to == ["alice@example.test"]
    assert got.message["Bcc"] is None
    assert got.message["Subject"] == "Hi Bcc: victim@example.test body"


def test_queueing_the_same_id_again_keeps_the_first_message(smtp: FakeSmtpServer) -> None:
    first = mail(delivery_id="reply-7", text="first")
    again = mail(delivery_id="reply-7", text="second")
    assert again.pk == first.pk and Delivery.objects.count() == 1
    assert "first" in fresh(first).body and "second" not in fresh(first).body


@pytest.mark.parametrize("bad", ["not an address", "a@b\r\nBcc: x@y"])
def test_it_refuses_a_bad_address(bad: str) -> None:
    with pytest.raises(outbox.BadDelivery):
        outbox.do_queue_email(to=bad, subject="s", text="t")


def test_it_refuses_a_delivery_id_that_cannot_be_a_message_id() -> None:
    with pytest.raises(outbox.BadDelivery, match="delivery id"):
        outbox.do_queue_email(to="a@b.test", subject="s", text="t", delivery_id="a b>")


@pytest.mark.django_db(transaction=True)
def test_simultaneous_attempts_send_once(smtp: FakeSmtpServer) -> None:
    smtp.slow(0.3)
    d = mail()
    results: list[str | None] = []

    def attempt() -> None:
        try:
            results.append(outbox.do_attempt_delivery(d.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("sent") == 1 and results.count(None) == 7
    time.sleep(0.2)
    assert len(smtp.messages) == 1 and smtp.attempts == 1


# --- webhooks --------------------------------------------------------------------------


def test_a_webhook_is_signed_and_carries_its_delivery_id() -> None:
    with Receiver(secret="hook-secret") as hooks:
        d = outbox.do_queue_webhook(
            url=hooks.url(),
            secret="hook-secret",
            payload={"event": "run.finished", "delivery_id": None, "data": {"run": 3}},
        )
        assert outbox.do_attempt_delivery(d.pk) == "sent"
        [hit] = hooks.wait_for(1)
        assert hit.json == {
            "event": "run.finished",
            "delivery_id": d.delivery_id,
            "data": {"run": 3},
        }
        assert hit.headers["x-agentweb-delivery"] == d.delivery_id
        assert hit.body == fresh(d).body.encode()


def test_a_wrong_secret_is_refused_by_the_receiver_and_retried() -> None:
    with Receiver(secret="the-right-one") as hooks:
        d = outbox.do_queue_webhook(url=hooks.url(), secret="wrong", payload={"a": 1})
        assert outbox.do_attempt_delivery(d.pk) == "queued"
        assert "HTTP 401" in fresh(d).last_error
        assert hooks.accepted == [] and "signature" in hooks.rejected[0].reason


def test_a_receiver_failing_three_times_gets_it_on_the_fourth() -> None:
    with Receiver(secret="s") as hooks:
        hooks.fail(3)
        d = outbox.do_queue_webhook(url=hooks.url(), secret="s", payload={"n": 1})
        states = []
        for _ in range(4):
            states.append(outbox.do_attempt_delivery(d.pk))
            due(d)
        assert states == ["queued", "queued", "queued", "sent"]
        assert "HTTP 500" in fresh(d).last_error
        assert len(hooks.accepted) == 1 and len(hooks.rejected) == 3


def test_a_receiver_that_hangs_times_out_and_is_retried(fast: None) -> None:
    with Receiver(secret="s") as hooks:
        hooks.hang(1)
        d = outbox.do_queue_webhook(url=hooks.url(), secret="s", payload={"n": 1})
        started = time.monotonic()
        assert outbox.do_attempt_delivery(d.pk) == "queued"
        assert time.monotonic() - started < 3
        assert "no answer within 0.5 s" in fresh(d).last_error
        hooks.release()
        due(d)
        assert outbox.do_attempt_delivery(d.pk) == "sent"


def test_a_dropped_connection_is_retried() -> None:
    with Receiver(secret="s") as hooks:
        hooks.drop(1)
        d = outbox.do_queue_webhook(url=hooks.url(), secret="s", payload={"n": 1})
        assert outbox.do_attempt_delivery(d.pk) == "queued"
        due(d)
        assert outbox.do_attempt_delivery(d.pk) == "sent"


def test_https_checks_the_certificate(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = make_ca(tmp_path / "ca")
    with Receiver(secret="s", ca=ca) as hooks:
        d = outbox.do_queue_webhook(url=hooks.url(), secret="s", payload={"n": 1})
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        assert outbox.do_attempt_delivery(d.pk) == "queued"
        assert "certificate" in fresh(d).last_error
        monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_file))
        due(d)
        assert outbox.do_attempt_delivery(d.pk) == "sent"


def test_a_slack_url_never_shows_in_a_reason() -> None:
    with Receiver() as slack:
        slack.fail(1, status=404)
        url = slack.url("/services/T000/B000/very-secret-token")
        d = outbox.do_queue_slack(url=url, payload={"text": "hi"})
        outbox.do_attempt_delivery(d.pk)
        row = fresh(d)
        assert "HTTP 404" in row.last_error and "very-secret-token" not in row.last_error
        assert row.as_notification()["to"] == "Slack"


def test_a_payload_that_is_not_json_is_refused() -> None:
    with pytest.raises(outbox.BadDelivery):
        outbox.do_queue_webhook(url="http://127.0.0.1:1/x", secret="s", payload={"x": float("nan")})


# --- order -----------------------------------------------------------------------------


def test_a_later_delivery_of_the_same_key_waits_for_the_earlier_one() -> None:
    with Receiver(secret="s") as hooks:
        hooks.fail(1)
        first = outbox.do_queue_webhook(
            url=hooks.url(), secret="s", payload={"n": 1}, ordering_key="run:1"
        )
        second = outbox.do_queue_webhook(
            url=hooks.url(), secret="s", payload={"n": 2}, ordering_key="run:1"
        )
        other = outbox.do_queue_webhook(
            url=hooks.url(), secret="s", payload={"n": 3}, ordering_key="run:2"
        )
        assert outbox.do_attempt_delivery(first.pk) == "queued"  # failed once: retry later
        assert outbox.do_attempt_delivery(second.pk) is None  # waits behind it
        assert outbox.do_attempt_delivery(other.pk) == "sent"  # another run is not held up
        due(first)
        assert outbox.do_attempt_delivery(first.pk) == "sent"
        assert outbox.do_attempt_delivery(second.pk) == "sent"
        assert [h.json["n"] for h in hooks.accepted] == [3, 1, 2]


def test_a_failed_delivery_lets_the_next_one_go(smtp: FakeSmtpServer) -> None:
    smtp.refuse(1, "554 5.7.1 Rejected")
    first = mail(ordering_key="k")
    second = mail(ordering_key="k")
    assert outbox.do_attempt_delivery(second.pk) is None
    assert outbox.do_attempt_delivery(first.pk) == "failed"
    assert outbox.do_attempt_delivery(second.pk) == "sent"


# --- hooks -----------------------------------------------------------------------------


def test_hooks_hear_of_every_change_after_commit(
    django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: list[tuple[str, str]] = []
    outbox.on_change("hooked", lambda d: heard.append((d.delivery_id, d.state)))
    woken: list[int] = []
    monkeypatch.setattr(outbox, "dispatch", lambda pk, lane: woken.append(pk))
    try:
        with Receiver(secret="s") as hooks:
            hooks.fail(1)
            with django_capture_on_commit_callbacks(execute=True):
                d = outbox.do_queue_webhook(
                    url=hooks.url(), secret="s", payload={}, about=("hooked", 1), delivery_id="h1"
                )
            assert heard == [("h1", "queued")] and woken == [d.pk]  # after commit only
            with django_capture_on_commit_callbacks(execute=True):
                outbox.do_attempt_delivery(d.pk)
            due(d)
            with django_capture_on_commit_callbacks(execute=True):
                outbox.do_attempt_delivery(d.pk)
    finally:
        outbox._hooks.pop("hooked")
    assert heard == [("h1", "queued"), ("h1", "queued"), ("h1", "sent")]
