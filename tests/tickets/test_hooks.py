"""Signed webhooks (DESIGN §11): generic and Zendesk sources, replays, refusals that store
nothing and leave the delivery id free, the intake command and the admin."""

from __future__ import annotations

import asyncio
import io
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from agentweb import signing
from agentweb.tickets import actions
from agentweb.tickets.models import Message, Source, Ticket, WebhookDelivery

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cret-for-the-generic-source-0123456789"
ZD_SECRET = "dGhlIHplbmRlc2sgc2lnbmluZyBzZWNyZXQ="


@pytest.fixture
def sources() -> dict[str, Source]:
    generic, _ = actions.do_add_source(
        "helpdesk", kind="generic", reply_url="https://desk.example/replies", secret=SECRET
    )
    zendesk, _ = actions.do_add_source("zendesk", kind="zendesk", secret=ZD_SECRET)
    return {"generic": generic, "zendesk": zendesk}


def created(delivery: str = "d-1", **ticket: Any) -> dict[str, Any]:
    return {
        "event": "ticket.created",
        "delivery_id": delivery,
        "ticket": {
            "external_id": "HD-7",
            "subject": "Parcel late",
            "requester": {"email": "ann@example.com", "name": "Ann Lee"},
            "queue": "shipping",
            "tags": ["late"],
            "fields": {"customer_id": "C001"},
            **ticket,
        },
        "message": {"external_id": "m-1", "body": "Where is my parcel?", "author": "Ann"},
    }


def post(body: Any, *, secret: str = SECRET, source: str = "helpdesk", **headers: str) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    signed = {**signing.agentweb_headers(secret, raw), **headers}
    return Client().post(
        f"/hooks/tickets/{source}",
        data=raw,
        content_type="application/json",
        headers={k: v for k, v in signed.items() if v is not None},
    )


def zendesk(body: dict[str, Any], invocation: str | None = "inv-1", **over: str) -> Any:
    raw = json.dumps(body).encode()
    ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {
        signing.ZENDESK_TIMESTAMP: ts,
        signing.ZENDESK_SIGNATURE: signing.zendesk_signature(ZD_SECRET, ts, raw),
        **({"X-Zendesk-Webhook-Invocation-Id": invocation} if invocation else {}),
        **over,
    }
    return Client().post(
        "/hooks/tickets/zendesk", data=raw, content_type="application/json", headers=headers
    )


def nothing_stored() -> bool:
    return not (Ticket.objects.exists() or WebhookDelivery.objects.exists())


# --- generic ------------------------------------------------------------------------------


def test_it_takes_a_new_ticket_then_its_updates_and_messages(sources: dict) -> None:
    first = post(created())
    assert first.status_code == 202, first.json()
    ticket = Ticket.objects.get(pk=first.json()["ticket"])
    assert (ticket.source, ticket.external_id, ticket.queue) == ("helpdesk", "HD-7", "shipping")
    assert ticket.requester_email == "ann@example.com" and ticket.tags == ["late"]
    [message] = ticket.thread()
    assert (message.body, message.author, message.external_id) == (
        "Where is my parcel?",
        "Ann",
        "m-1",
    )

    update = {
        "event": "ticket.updated",
        "delivery_id": "d-2",
        "ticket": {"external_id": "HD-7", "status": "pending", "tags": ["late", "vip"]},
    }
    assert post(update).status_code == 202
    ticket.refresh_from_db()
    assert ticket.status == "pending" and ticket.tags == ["late", "vip"]
    assert ticket.subject == "Parcel late"  # not sent: kept

    wrote = {
        "event": "message.created",
        "delivery_id": "d-3",
        "ticket": {"external_id": "HD-7"},
        "message": {"external_id": "m-2", "body": "Any news?"},
    }
    assert post(wrote).json() == {"ticket": ticket.pk}
    ticket.refresh_from_db()
    assert [m.body for m in ticket.thread()] == ["Where is my parcel?", "Any news?"]
    assert ticket.status == "open"  # the customer wrote again
    # the same message id in another delivery: the ticket has it already
    assert post({**wrote, "delivery_id": "d-4"}).status_code == 202
    assert Message.objects.count() == 2


def test_a_replayed_delivery_is_200_and_changes_nothing_twice(sources: dict) -> None:
    ticket_id = post(created()).json()["ticket"]
    Ticket.objects.filter(pk=ticket_id).update(queue="moved-by-a-person")
    again = post(created(queue="shipping"))
    assert again.status_code == 200
    assert again.json() == {"ticket": ticket_id, "replayed": True}
    assert Ticket.objects.get().queue == "moved-by-a-person" and Message.objects.count() == 1
    assert WebhookDelivery.objects.count() == 1


@pytest.mark.parametrize(
    ("headers", "secret", "words"),
    [
        ({signing.AGENTWEB_SIGNATURE: None}, SECRET, "X-Agentweb-Signature is missing"),
        ({signing.AGENTWEB_TIMESTAMP: None}, SECRET, "X-Agentweb-Timestamp is missing"),
        ({}, "another-secret-entirely-0123456789", "does not match"),
        ({signing.AGENTWEB_SIGNATURE: "md5=abc"}, SECRET, "sha256="),
        ({signing.AGENTWEB_TIMESTAMP: "yesterday"}, SECRET, "unix seconds"),
    ],
)
def test_a_bad_signature_is_401_stores_nothing_and_leaves_the_id_free(
    sources: dict, headers: dict, secret: str, words: str
) -> None:
    refused = post(created(), secret=secret, **headers)
    assert refused.status_code == 401 and refused["Content-Type"] == "application/json"
    assert refused.json()["error"]["code"] == "bad_signature"
    assert words in refused.json()["error"]["message"]
    assert nothing_stored()
    assert post(created()).status_code == 202  # the same delivery id, now signed right


def test_an_old_or_future_timestamp_is_401(sources: dict) -> None:
    raw = json.dumps(created()).encode()
    for skew in (-301, 301):
        headers = signing.agentweb_headers(SECRET, raw, now=time.time() + skew)
        response = Client().post(
            "/hooks/tickets/helpdesk", data=raw, content_type="application/json", headers=headers
        )
        assert response.status_code == 401 and "300 s" in response.json()["error"]["message"]
    assert nothing_stored()
    headers = signing.agentweb_headers(SECRET, raw, now=time.time() - 250)
    ok = Client().post(
        "/hooks/tickets/helpdesk", data=raw, content_type="application/json", headers=headers
    )
    assert ok.status_code == 202


def test_the_signature_covers_the_bytes_sent(sources: dict) -> None:
    raw = json.dumps(created()).encode()
    headers = signing.agentweb_headers(SECRET, raw)
    tampered = raw.replace(b"Parcel late", b"Parcel LATE")
    response = Client().post(
        "/hooks/tickets/helpdesk", data=tampered, content_type="application/json", headers=headers
    )
    assert response.status_code == 401 and nothing_stored()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        (b"[1, 2]", "body"),
        (b'{"event": "ticket.created", "delivery_id": "d-1", "x": NaN}', "body"),
        ({**created(), "event": "ticket.deleted"}, "event"),
        ({k: v for k, v in created().items() if k != "delivery_id"}, "delivery_id"),
        (created(external_id=""), "ticket.external_id"),
        (created(subject=""), "ticket.subject"),
        (created(tags="late"), "ticket.tags"),
        (created(status="archived"), "ticket.status"),
        (created(requester={"email": "nope"}), "ticket.requester.email"),
        ({**created(), "message": {"body": ""}}, "message.body"),
        ({**created(), "event": "message.created", "message": None}, "message"),
        ({**created(), "ticket": "HD-7"}, "ticket"),
    ],
)
def test_a_malformed_payload_is_422_naming_the_field_and_leaves_the_id_free(
    sources: dict, body: Any, field: str
) -> None:
    refused = post(body)
    assert refused.status_code == 422, refused.content
    assert refused.json()["error"]["field"] == field, refused.json()
    assert nothing_stored()
    assert post(created()).status_code == 202


def test_unknown_sources_wrong_methods_and_big_bodies_answer_json(sources: dict) -> None:
    unknown = post(created(), source="nobody")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_source"
    Source.objects.filter(name="helpdesk").update(enabled=False)
    assert post(created()).status_code == 404
    Source.objects.filter(name="helpdesk").update(enabled=True)
    got = Client().get("/hooks/tickets/helpdesk")
    assert got.status_code == 405 and got.json()["error"]["code"] == "method_not_allowed"
    lost = Client().post("/hooks/elsewhere", data=b"{}", content_type="application/json")
    assert lost.status_code == 404 and lost["Content-Type"] == "application/json"
    big = post({**created(), "padding": "x" * 1_100_000})
    assert big.status_code == 413 and big.json()["error"]["code"] == "too_large"
    assert nothing_stored()


def test_the_same_delivery_ten_times_at_once_is_applied_once(sources: dict, web: str) -> None:
    raw = json.dumps(created()).encode()
    headers = {**signing.agentweb_headers(SECRET, raw), "Content-Type": "application/json"}

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=web, timeout=30) as client:
            return await asyncio.gather(
                *(
                    client.post("/hooks/tickets/helpdesk", content=raw, headers=headers)
                    for _ in range(10)
                )
            )

    codes = sorted(r.status_code for r in asyncio.run(burst()))
    assert codes == [200] * 9 + [202]
    assert Ticket.objects.count() == 1 and Message.objects.count() == 1
    assert WebhookDelivery.objects.count() == 1


# --- Zendesk ------------------------------------------------------------------------------

ZD_TICKET = {
    "id": "35436",
    "subject": "My printer is on fire!",
    "description": "The smoke is very colorful.",
    "requester": {"email": "jo@example.com", "name": "Jo Smith"},
    "tags": "printer urgent",
    "status": "New",
    "latest_comment": "The smoke is very colorful.",
    "group": "Hardware",
}


def test_zendesk_creates_then_updates_with_its_latest_comment(sources: dict) -> None:
    first = zendesk({"ticket": ZD_TICKET})
    assert first.status_code == 202, first.json()
    ticket = Ticket.objects.get()
    assert (ticket.source, ticket.external_id, ticket.subject) == (
        "zendesk", "35436", "My printer is on fire!",
    )  # fmt: skip
    assert ticket.tags == ["printer", "urgent"] and ticket.queue == "Hardware"
    assert ticket.status == "open" and ticket.requester_name == "Jo Smith"
    assert [m.body for m in ticket.thread()] == ["The smoke is very colorful."]

    same_comment = {**ZD_TICKET, "status": "Pending", "tags": ["printer"]}
    assert zendesk({"ticket": same_comment}, "inv-2").status_code == 202
    ticket.refresh_from_db()
    assert ticket.status == "pending" and ticket.tags == ["printer"]
    assert Message.objects.count() == 1  # latest_comment did not change

    new_comment = {**same_comment, "latest_comment": "Now it is out. Please advise.", "id": 35436}
    assert zendesk({"ticket": new_comment}, "inv-3").status_code == 202
    assert [m.body for m in Ticket.objects.get().thread()][-1] == "Now it is out. Please advise."
    replay = zendesk({"ticket": {**new_comment, "latest_comment": "other"}}, "inv-3")
    assert replay.status_code == 200 and Message.objects.count() == 2


def test_zendesk_does_not_take_our_own_reply_back_as_the_customers(sources: dict) -> None:
    ticket_id = zendesk({"ticket": ZD_TICKET}).json()["ticket"]
    ticket = Ticket.objects.get(pk=ticket_id)
    actions.do_add_outgoing(ticket, "Please unplug it now.", author="assistant")
    echo = {**ZD_TICKET, "latest_comment": "Please unplug it now.", "status": "Pending"}
    assert zendesk({"ticket": echo}, "inv-2").status_code == 202
    assert [m.direction for m in Ticket.objects.get().thread()] == ["in", "out"]


def test_zendesk_refusals(sources: dict) -> None:
    missing = zendesk({"ticket": ZD_TICKET}, invocation=None)
    assert missing.status_code == 422
    assert missing.json()["error"]["field"] == "X-Zendesk-Webhook-Invocation-Id"
    bad_status = zendesk({"ticket": {**ZD_TICKET, "status": "Exploded"}})
    assert bad_status.status_code == 422 and bad_status.json()["error"]["field"] == "ticket.status"
    no_id = zendesk({"ticket": {k: v for k, v in ZD_TICKET.items() if k != "id"}})
    assert no_id.status_code == 422 and no_id.json()["error"]["field"] == "ticket.id"
    wrong = zendesk({"ticket": ZD_TICKET}, **{signing.ZENDESK_SIGNATURE: "AAAA"})
    assert wrong.status_code == 401
    old = (datetime.now(UTC) - timedelta(minutes=6)).isoformat()
    raw = json.dumps({"ticket": ZD_TICKET}).encode()
    stale = Client().post(
        "/hooks/tickets/zendesk",
        data=raw,
        content_type="application/json",
        headers={
            signing.ZENDESK_TIMESTAMP: old,
            signing.ZENDESK_SIGNATURE: signing.zendesk_signature(ZD_SECRET, old, raw),
            "X-Zendesk-Webhook-Invocation-Id": "inv-1",
        },
    )
    assert stale.status_code == 401
    ours = post({"ticket": ZD_TICKET}, source="zendesk", secret=ZD_SECRET)  # not its scheme
    assert ours.status_code == 401
    assert nothing_stored()
    assert zendesk({"ticket": ZD_TICKET}).status_code == 202


# --- managing sources ---------------------------------------------------------------------


def test_intake_add_source_prints_a_working_secret_once(db: None) -> None:
    out = io.StringIO()
    call_command("intake", "add-source", "desk", "--kind", "generic", stdout=out)
    lines = out.getvalue().strip().splitlines()
    secret = lines[-1]
    assert len(secret) >= 32 and "/hooks/tickets/desk" in lines[0]
    assert post(created(), secret=secret, source="desk").status_code == 202
    listing = io.StringIO()
    call_command("intake", "sources", stdout=listing)
    assert "desk\tgeneric" in listing.getvalue() and secret not in listing.getvalue()
    again = io.StringIO()
    call_command("intake", "set-secret", "desk", stdout=again)
    assert again.getvalue().strip().splitlines()[-1] != secret
    assert post(created("d-2"), secret=secret, source="desk").status_code == 401


def test_intake_takes_zendesks_secret_from_stdin_and_refuses_bad_sources(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(ZD_SECRET + "\n"))
    out = io.StringIO()
    call_command(
        "intake", "add-source", "zendesk", "--kind", "zendesk", "--secret-stdin", stdout=out
    )
    assert out.getvalue().strip().splitlines()[-1] == ZD_SECRET
    assert zendesk({"ticket": ZD_TICKET}).status_code == 202
    for name, extra, words in [
        ("email", [], "built-in"),
        ("Bad Name", [], "a-z"),
        ("zendesk", [], "exists"),
        ("x", ["--reply-url", "ftp://x"], r"not an http\(s\) URL"),
    ]:
        with pytest.raises(CommandError, match=words):
            call_command("intake", "add-source", name, *extra, stdout=io.StringIO())


def test_the_admin_shows_a_new_sources_secret_once(transactional_db: None) -> None:
    from django.contrib.auth.models import User

    admin = User.objects.create_superuser("root", password="pw-123456789")
    client = Client()
    client.force_login(admin)
    response = client.post(
        "/admin/tickets/source/add/",
        {"name": "freshdesk", "kind": "generic", "reply_url": "", "enabled": "on"},
        follow=True,
    )
    assert response.status_code == 200
    source = Source.objects.get(name="freshdesk")
    assert len(source.secret) >= 32 and source.secret in response.content.decode()
    page = client.get(f"/admin/tickets/source/{source.pk}/change/").content.decode()
    assert source.secret not in page
    refused = client.post(
        "/admin/tickets/source/add/", {"name": "api", "kind": "generic", "enabled": "on"}
    )
    assert "built-in source" in refused.content.decode()
    assert not Source.objects.filter(name="api").exists()
