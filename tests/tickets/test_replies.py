"""Replies out (DESIGN §11) on the shared outbox, against real peers on loopback: aiosmtpd
for mail, an HTTP receiver that checks our signature and fails on purpose. Attempts are
made in the test's thread; test_replies_e2e.py has the worker's side."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from agentweb.outbox import actions as outbox
from agentweb.outbox.config import parse_smtp_url
from agentweb.outbox.models import Delivery
from agentweb.runtime.tools import ToolContext, load_tools
from agentweb.tickets import actions, mailbox
from agentweb.tickets.mailparse import parse
from agentweb.tickets.models import Message, Ticket
from agentweb.tickets.serialize import ticket_json
from tests.fakes.receiver import Receiver
from tests.fakes.smtp_server import FakeSmtpServer
from tests.tickets.factories import make_ticket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def smtp(settings: Any) -> Iterator[FakeSmtpServer]:
    with FakeSmtpServer() as server:
        settings.AGENTWEB_SMTP = parse_smtp_url(server.url)
        settings.AGENTWEB_MAIL_FROM = "Support <support@shop.example>"
        yield server


def reply(ticket: Ticket, text: str = "Your parcel is on its way.", call_id: str = "c1") -> Any:
    tool = load_tools(["tools.ticket"]).get("send_customer_reply")
    ctx = ToolContext(call_id=call_id, run_id=None, subject=str(ticket.pk))
    return tool.fn(**tool.call_kwargs(tool.parse({"message": text}), ctx))


def email_ticket(subject: str = "Parcel late") -> Ticket:
    ticket = make_ticket(
        subject, "Where is my parcel?", source="email",
        external_id="<first@customer.example>", requester_email="ann@customer.example",
        requester_name="Ann Lee",
    )  # fmt: skip
    Message.objects.filter(ticket=ticket).update(external_id="<first@customer.example>")
    actions.do_add_incoming(
        ticket.pk,
        actions.Incoming(
            source="email", subject=subject, body="Any news?",
            message_external_id="<second@customer.example>",
        ),
    )  # fmt: skip
    return ticket


def due() -> None:
    Delivery.objects.update(next_attempt_at=timezone.now())


def delivery_of(ticket: Ticket) -> dict[str, Any]:
    out = [m for m in ticket_json(ticket, None)["messages"] if m["direction"] == "out"]
    assert len(out) == 1
    return dict(out[0]["delivery"])


def test_an_email_reply_threads_and_its_message_id_is_its_delivery_id(
    smtp: FakeSmtpServer,
) -> None:
    ticket = email_ticket()
    result = reply(ticket)
    assert result["status"] == "queued" and result["to"] == "ann@customer.example"
    message = Message.objects.get(direction="out")
    assert message.delivery_id == f"reply-{message.pk}"
    assert message.external_id == f"<reply-{message.pk}@shop.example>"
    assert delivery_of(ticket)["state"] == "queued"
    [row] = outbox.deliveries_about("ticketmessage", message.pk)
    assert outbox.do_attempt_delivery(row.pk) == "sent"
    [got] = smtp.wait_for(1)
    mail = got.message
    assert got.envelope_to == ["ann@customer.example"]
    assert mail["To"] == "Ann Lee <ann@customer.example>"
    assert mail["Subject"] == f"Re: Parcel late [#{ticket.pk}]"
    assert mail["Message-ID"] == message.external_id
    assert mail["In-Reply-To"] == "<second@customer.example>"
    assert mail["References"] == "<first@customer.example> <second@customer.example>"
    assert got.text().strip() == "Your parcel is on its way."
    state = delivery_of(ticket)
    assert (state["state"], state["attempts"], state["reason"]) == ("sent", 1, "")
    ticket.refresh_from_db()
    assert ticket.status == "pending"  # the ball is in the customer's court
    # the customer's answer to our mail comes back onto this ticket
    answer = (
        b"From: Ann Lee <ann@customer.example>\r\nSubject: Re: Parcel late\r\n"
        b"Message-ID: <third@customer.example>\r\nIn-Reply-To: " + message.external_id.encode()
        + b"\r\n\r\nThanks!\r\n"
    )  # fmt: skip
    assert mailbox.thread_of(parse(answer)) == ticket


def test_the_subject_keeps_one_re_and_one_tag(smtp: FakeSmtpServer) -> None:
    ticket = email_ticket("Re: Parcel late [#77]")
    reply(ticket)
    [row] = Delivery.objects.all()
    outbox.do_attempt_delivery(row.pk)
    assert smtp.wait_for(1)[0].message["Subject"] == f"Re: Parcel late [#{ticket.pk}]"


def test_an_smtp_server_refusing_then_accepting(smtp: FakeSmtpServer) -> None:
    smtp.refuse(2, "451 4.3.0 Mailbox busy, try later")
    ticket = email_ticket()
    reply(ticket)
    [row] = Delivery.objects.all()
    assert outbox.do_attempt_delivery(row.pk) == "queued"
    state = delivery_of(ticket)
    assert state["state"] == "queued" and state["attempts"] == 1 and "451" in state["reason"]
    due()
    assert outbox.do_attempt_delivery(row.pk) == "queued"
    due()
    assert outbox.do_attempt_delivery(row.pk) == "sent"
    assert len(smtp.wait_for(1)) == 1 and smtp.attempts == 3
    assert len({m.data for m in smtp.seen}) == 1  # every attempt sent the same bytes
    assert delivery_of(ticket) | {"sent_at": None} == {
        "state": "sent", "reason": "", "attempts": 3, "to": "ann@customer.example", "sent_at": None,
    }  # fmt: skip


def test_a_reply_receiver_answering_500_then_taking_it(settings: Any) -> None:
    source, secret = actions.do_add_source("helpdesk", kind="generic", secret="x" * 32)
    with Receiver(secret=secret) as receiver:
        source.reply_url = receiver.url("/replies")
        source.save()
        receiver.fail(2, 500)
        ticket = make_ticket(source="helpdesk", external_id="HD-7")
        reply(ticket, "We refunded the duplicate charge.")
        [row] = Delivery.objects.all()
        assert outbox.do_attempt_delivery(row.pk) == "queued"
        assert "500" in delivery_of(ticket)["reason"]
        due()
        assert outbox.do_attempt_delivery(row.pk) == "queued"
        due()
        assert outbox.do_attempt_delivery(row.pk) == "sent"
        [hit] = receiver.wait_for(1)
        message = Message.objects.get(direction="out")
        assert hit.json == {
            "event": "message.created",
            "delivery_id": f"reply-{message.pk}",
            "ticket": {"id": ticket.pk, "external_id": "HD-7"},
            "message": {"id": message.pk, "body": "We refunded the duplicate charge."},
        }
        assert hit.delivery_id == f"reply-{message.pk}"
        assert [h.status for h in receiver.hits] == [500, 500, 200]
        assert delivery_of(ticket)["state"] == "sent"


def test_without_a_channel_the_reply_is_stored_and_shown_as_not_delivered(settings: Any) -> None:
    settings.AGENTWEB_SMTP = None
    cases = {
        make_ticket(source="demo"): "tickets from 'demo' have no reply channel",
        email_ticket(): "mail is off (AGENTWEB_SMTP_URL is not set)",
    }
    actions.do_add_source("quiet", kind="generic")
    cases[make_ticket(source="quiet", external_id="Q-1")] = "source 'quiet' has no reply URL"
    for n, (ticket, words) in enumerate(cases.items()):
        result = reply(ticket, call_id=f"c{n}")
        assert result["status"] == "not_delivered" and words in result["delivery"]
        state = delivery_of(ticket)
        assert state == {"state": "failed", "reason": f"not delivered: {words}", "attempts": 0}
    assert not Delivery.objects.exists()


def test_the_same_call_twice_writes_and_delivers_once(smtp: FakeSmtpServer) -> None:
    ticket = email_ticket()
    first = reply(ticket, call_id="same")
    again = reply(ticket, call_id="same")
    assert first == again
    assert Message.objects.filter(direction="out").count() == 1
    assert Delivery.objects.count() == 1
