"""Email in (DESIGN §11) against a real IMAP server (dovecot on a loopback port): new
tickets, threading, HTML and quotes, attachments, never twice, a mailbox that is down,
TLS, and beat polling through a real worker."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError

from agentweb.tickets import mailbox
from agentweb.tickets.config import ImapConfig, parse_imap_url
from agentweb.tickets.models import ImportedMail, Mailbox, Message, Ticket
from tests.conftest import start_beat, start_worker, wait_for
from tests.fakes.imap_server import ImapServer
from tests.fakes.tls import make_ca

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def server() -> Iterator[ImapServer]:
    imap = ImapServer(tls="off").start()
    yield imap
    imap.close()


@pytest.fixture
def box(server: ImapServer) -> Iterator[ImapConfig]:
    """The module's mailbox, emptied for each test (a new folder state)."""
    config = parse_imap_url(server.url)
    assert config is not None
    conn = server._client()
    conn.select("INBOX")
    conn.uid("STORE", "1:*", "+FLAGS", r"(\Deleted)")
    conn.expunge()
    conn.logout()
    yield config


def mail(
    subject: str = "Parcel late",
    body: str = "Where is my order A1001?",
    *,
    sender: str = "Ann Lee <ann@example.com>",
    html: str | None = None,
    reply_to: str | None = None,
    references: str | None = None,
    message_id: str | None = None,
    attachments: tuple[tuple[str, bytes], ...] = (),
    headers: dict[str, str] | None = None,
) -> tuple[bytes, str]:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = "support@agentweb.example"
    msg["Subject"] = subject
    msg["Date"] = format_datetime(datetime.now(UTC))
    msg["Message-ID"] = message_id or make_msgid(domain="customer.example")
    if reply_to:
        msg["In-Reply-To"] = reply_to
    if references:
        msg["References"] = references
    for name, value in (headers or {}).items():
        msg[name] = value
    if html is not None and body:
        msg.set_content(body)
        msg.add_alternative(html, subtype="html")
    elif html is not None:
        msg.set_content(html, subtype="html")
    else:
        msg.set_content(body)
    for name, data in attachments:
        msg.add_attachment(data, maintype="application", subtype="octet-stream", filename=name)
    return msg.as_bytes(), str(msg["Message-ID"])


def poll(config: ImapConfig) -> mailbox.PollResult:
    result = mailbox.poll_now(config)
    assert result.polled
    return result


def test_a_new_mail_becomes_a_ticket_with_its_attachments(
    server: ImapServer, box: ImapConfig
) -> None:
    raw, mid = mail(
        attachments=(("receipt.pdf", b"%PDF" + b"x" * 1020), ("photo.jpg", b"\xff" * 10))
    )
    server.append(raw)
    assert poll(box).imported == 1
    ticket = Ticket.objects.get()
    assert (ticket.source, ticket.external_id, ticket.subject) == ("email", mid, "Parcel late")
    assert (ticket.requester_email, ticket.requester_name) == ("ann@example.com", "Ann Lee")
    [message] = ticket.thread()
    assert message.body == "Where is my order A1001?" and message.external_id == mid
    assert message.as_json()["attachments"] == [
        {"name": "receipt.pdf", "size": 1024},
        {"name": "photo.jpg", "size": 10},
    ]


def test_html_is_reduced_to_text_and_quoted_history_kept_apart(
    server: ImapServer, box: ImapConfig
) -> None:
    html = (
        "<html><head><style>p {color: red}</style><script>alert('x')</script></head><body>"
        "<p>Hello,</p><p>the <b>teapot</b> arrived &amp; it is <i>cracked</i>.<br>"
        "Photo attached.</p>"
        '<div class="gmail_quote">On Mon, 1 Dec 2026 at 10:00, Support &lt;s@shop.example&gt; '
        "wrote:<blockquote>Your order A1005 has shipped.</blockquote></div></body></html>"
    )
    server.append(mail("Cracked teapot", "", html=html)[0])
    poll(box)
    message = Message.objects.get()
    assert message.body == "Hello,\nthe teapot arrived & it is cracked.\nPhoto attached."
    assert "alert" not in message.body and "<" not in message.body and "color" not in message.body
    assert (
        message.quoted.startswith("On Mon, 1 Dec 2026") and "> Your order A1005" in message.quoted
    )
    plain = (
        "Yes, please refund it.\n\nOn Tue, 2 Dec 2026, Support <s@shop.example> wrote:\n"
        "> Shall we refund?\n> Best"
    )
    server.append(mail("Re: Cracked teapot", plain, html="<p>ignored: the plain part wins</p>")[0])
    poll(box)
    reply = Message.objects.order_by("pk").last()
    assert reply is not None and reply.body == "Yes, please refund it."
    assert reply.quoted.endswith("> Shall we refund?\n> Best")


def test_replies_thread_by_references_by_our_message_id_and_by_ticket_tag(
    server: ImapServer, box: ImapConfig
) -> None:
    first, first_id = mail()
    server.append(first)
    poll(box)
    ticket = Ticket.objects.get()
    server.append(mail("Re: Parcel late", "Any news?", reply_to=first_id, references=first_id)[0])
    assert poll(box).imported == 1
    ours = Message.objects.create(
        ticket=ticket,
        direction="out",
        body="It is on its way.",
        external_id="<msg-77@agentweb.example>",
    )
    server.append(
        mail("Re: Re: Parcel late", "Thanks!", references=f"{first_id} {ours.external_id}")[0]
    )
    server.append(mail(f"Another thing [#{ticket.pk}]", "Also: my address changed.")[0])
    stranger = mail(f"Spam [#{ticket.pk}]", "Let me into this ticket", sender="x@evil.example")[0]
    server.append(stranger)
    assert poll(box).imported == 3
    assert [m.body for m in ticket.thread()] == [
        "Where is my order A1001?",
        "Any news?",
        "It is on its way.",
        "Thanks!",
        "Also: my address changed.",
    ]
    other = Ticket.objects.exclude(pk=ticket.pk).get()
    assert other.requester_email == "x@evil.example"  # [#id] from a stranger: a new ticket
    ticket.refresh_from_db()
    assert ticket.status == "open"


def test_a_mail_is_never_imported_twice(server: ImapServer, box: ImapConfig) -> None:
    raw, mid = mail()
    server.append(raw)
    server.append(mail("Second", "Two")[0])
    assert poll(box).imported == 2
    assert poll(box).imported == 0  # nothing new
    server.append(raw)  # the same mail again, under a new UID
    result = poll(box)
    assert (result.imported, result.skipped) == (0, 1)
    assert Message.objects.count() == 2
    # the folder's UIDs start over (a restored mailbox): Message-IDs keep the old ones out
    server.stop()
    server.new_uidvalidity()
    server.start()
    before = Mailbox.objects.get().uidvalidity
    server.append(mail("Third", "Three")[0])
    result = poll(box)
    assert Mailbox.objects.get().uidvalidity != before
    assert result.imported == 1 and Message.objects.count() == 3
    assert set(Ticket.objects.values_list("subject", flat=True)) == {
        "Parcel late",
        "Second",
        "Third",
    }


def test_an_import_that_fails_midway_takes_nothing_and_the_next_poll_takes_it_once(
    server: ImapServer, box: ImapConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.append(mail("One", "1")[0])
    server.append(mail("Two", "2")[0])
    real = mailbox._file
    calls = {"n": 0}

    def flaky(parsed: Any) -> Any:
        calls["n"] += 1
        message = real(parsed)
        if calls["n"] == 2:
            raise OperationalError("the database went away")  # after the ticket was written
        return message

    monkeypatch.setattr(mailbox, "_file", flaky)
    with pytest.raises(OperationalError):
        poll(box)
    assert list(Ticket.objects.values_list("subject", flat=True)) == ["One"]
    assert ImportedMail.objects.count() == 1
    Mailbox.objects.update(lease_until=None)  # the poll died with its lease (kill -9)
    monkeypatch.setattr(mailbox, "_file", real)
    assert poll(box).imported == 1
    assert sorted(Ticket.objects.values_list("subject", flat=True)) == ["One", "Two"]
    assert Message.objects.count() == 2


def test_machines_and_our_own_mails_are_not_tickets(
    server: ImapServer, box: ImapConfig, settings: Any
) -> None:
    settings.AGENTWEB_MAIL_FROM = "Support <support@agentweb.example>"
    server.append(mail("Out of office", "I am away", headers={"Auto-Submitted": "auto-replied"})[0])
    server.append(mail("Re: x", "our reply", sender="Support <SUPPORT@agentweb.example>")[0])
    server.append(mail("Newsletter", "Sale!", headers={"Precedence": "bulk"})[0])
    result = poll(box)
    assert (result.imported, result.skipped) == (0, 3)
    assert not Ticket.objects.exists()
    assert sorted(ImportedMail.objects.values_list("skipped", flat=True)) == [
        "Auto-Submitted: auto-replied", "Precedence: bulk", "our own mail",
    ]  # fmt: skip


def test_a_mailbox_that_is_down_is_logged_once_and_read_when_back(
    server: ImapServer, box: ImapConfig, caplog: pytest.LogCaptureFixture
) -> None:
    server.stop()
    caplog.set_level(logging.INFO, logger="agentweb.tickets.mailbox")
    try:
        first = poll(box)
        assert first.error and "cannot reach" in first.error
        assert poll(box).error
        warnings = [r for r in caplog.records if "cannot be read" in r.getMessage()]
        assert len(warnings) == 1  # one line per outage
        row = Mailbox.objects.get()
        assert row.last_error and row.lease_until is None
        server.drop_into_maildir(mail("Written while down", "hello")[0])
    finally:
        server.start()
    assert poll(box).imported == 1
    assert Ticket.objects.get().subject == "Written while down"
    assert Mailbox.objects.get().last_error == ""
    assert any("can be read again" in r.getMessage() for r in caplog.records)


def test_a_wrong_password_is_an_error_not_a_crash(server: ImapServer, box: ImapConfig) -> None:
    result = mailbox.poll_now(replace(box, password="not-it"))
    assert "refused the login" in result.error
    assert not Ticket.objects.exists()


def test_tls_starttls_and_imaps_with_the_certificate_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = make_ca(tmp_path / "ca")
    for kind in ("starttls", "implicit"):
        imap = ImapServer(tls=kind, ca=ca).start()  # type: ignore[arg-type]
        try:
            config = parse_imap_url(imap.url)
            assert config is not None and config.tls
            imap.append(mail(f"Over {kind}", "secret text")[0])
            monkeypatch.delenv("SSL_CERT_FILE", raising=False)
            untrusted = mailbox.poll_now(config)
            assert "CERTIFICATE_VERIFY_FAILED" in untrusted.error, untrusted.error
            monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_file))
            assert mailbox.poll_now(config).imported == 1
        finally:
            imap.close()
    plain = ImapServer(tls="off").start()
    try:
        url = plain.url.replace("?tls=off", "")
        config = parse_imap_url(url)
        assert config is not None
        refused = mailbox.poll_now(config)
        assert "does not offer STARTTLS" in refused.error
    finally:
        plain.close()
    assert sorted(Ticket.objects.values_list("subject", flat=True)) == [
        "Over implicit",
        "Over starttls",
    ]


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("pop3://a:b@mail.example/INBOX", "imaps:// or imap://"),
        ("imaps://mail.example/INBOX", "user and password"),
        ("imap://a:b@mail.example/INBOX?tls=off", "loopback"),
        ("imaps://a:b@127.0.0.1/INBOX?tls=off", "TLS from the start"),
        ("imap://a:b@127.0.0.1/INBOX?ssl=1", "unknown option"),
    ],
)
def test_bad_imap_urls_stop_start_up_naming_the_variable(url: str, words: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="AGENTWEB_IMAP_URL") as raised:
        parse_imap_url(url)
    assert words in str(raised.value)


def test_defaults_of_a_good_url() -> None:
    config = parse_imap_url("imaps://help%40shop.example:p%40ss@mail.example/Support%20Inbox")
    assert config is not None
    assert (config.username, config.password, config.port) == ("help@shop.example", "p@ss", 993)
    assert config.folder == "Support Inbox" and "p@ss" not in config.describe()


@pytest.mark.e2e
def test_beat_polls_the_mailbox_through_a_real_worker(
    server: ImapServer, box: ImapConfig, stack_env: dict[str, str], tmp_path: Path
) -> None:
    env = {
        **stack_env,
        "AGENTWEB_QUEUE": f"mailbox-{os.getpid()}",
        "AGENTWEB_IMAP_URL": server.url,
        "AGENTWEB_IMAP_POLL_SECONDS": "2",
    }
    worker = start_worker(env, tmp_path, "mail-worker", 2)
    beat = start_beat(env, tmp_path)
    try:
        server.append(mail("Via beat", "Polled, not asked for")[0])
        wait_for(lambda: Ticket.objects.filter(subject="Via beat").exists(), timeout=30)
        server.append(mail("Second via beat", "again")[0])
        wait_for(lambda: Ticket.objects.filter(subject="Second via beat").exists(), timeout=30)
        time.sleep(5)  # more polls: nothing twice
        assert Ticket.objects.count() == 2 and Message.objects.count() == 2
        assert Mailbox.objects.get().last_ok_at is not None
    finally:
        beat.stop()
        worker.stop()


def test_intake_poll_reads_the_mailbox_now(
    server: ImapServer, box: ImapConfig, settings: Any
) -> None:
    import io

    from django.core.management import CommandError, call_command

    settings.AGENTWEB_IMAP = box
    server.append(mail("From the command line", "hi")[0])
    out = io.StringIO()
    call_command("intake", "poll", stdout=out)
    assert "1 imported, 0 skipped" in out.getvalue()
    settings.AGENTWEB_IMAP = replace(box, port=1)
    with pytest.raises(CommandError, match="cannot reach"):
        call_command("intake", "poll", stdout=io.StringIO())
