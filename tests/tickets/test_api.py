"""The tickets' JSON API (DESIGN §11): create with dedupe, read, filter, change, add
messages; refused bodies name their field; the OpenAPI document lists what it answers."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from django.test import Client

from agentweb.tickets.models import Message, Ticket
from tests.tickets.conftest import bearer, send
from tests.tickets.factories import make_ticket

NEW = {
    "source": "helpdesk",
    "external_id": "T-100",
    "subject": "Parcel late",
    "body": "Where is my order A1001?",
    "requester": {"email": "ann@example.com", "name": "Ann Lee"},
    "queue": "shipping",
    "tags": ["late", "vip", "late", " "],
    "fields": {"customer_id": "C001", "order_id": "A1001"},
}
KEYS = {
    "id", "source", "external_id", "subject", "body", "customer", "customer_name", "requester",
    "status", "queue", "tags", "fields", "messages", "created_at", "updated_at", "active_run",
}  # fmt: skip


def test_it_creates_a_ticket_and_shows_it_in_every_shape(people: dict) -> None:
    client = bearer(people["operator"])
    created = send(client, "post", "/api/tickets", NEW)
    assert created.status_code == 201, created.json()
    ticket = created.json()
    assert set(ticket) == KEYS
    assert ticket["source"] == "helpdesk" and ticket["external_id"] == "T-100"
    assert ticket["requester"] == {"email": "ann@example.com", "name": "Ann Lee"}
    assert ticket["tags"] == ["late", "vip"] and ticket["status"] == "open"
    assert ticket["customer"] == "C001" and ticket["body"] == NEW["body"]
    assert ticket["active_run"] is None
    [message] = ticket["messages"]
    assert message["direction"] == "in" and message["author"] == "Ann Lee"
    assert message["attachments"] == [] and message["external_id"] is None
    assert client.get(f"/api/tickets/{ticket['id']}").json() == ticket
    listed = client.get("/api/tickets?status=open").json()["tickets"]
    assert listed == [ticket]


def test_the_same_source_and_external_id_is_the_same_ticket(people: dict) -> None:
    client = bearer(people["operator"])
    first = send(client, "post", "/api/tickets", NEW).json()
    again = send(client, "post", "/api/tickets", {**NEW, "subject": "ignored", "queue": "x"})
    assert again.status_code == 200 and again.json() == first
    follow_up = send(client, "post", "/api/tickets", {**NEW, "body": "Any news?"})
    assert follow_up.status_code == 200
    assert [m["body"] for m in follow_up.json()["messages"]] == [NEW["body"], "Any news?"]
    other_source = send(client, "post", "/api/tickets", {**NEW, "source": "api"})
    assert other_source.status_code == 201 and other_source.json()["id"] != first["id"]
    no_external_id = {k: v for k, v in NEW.items() if k != "external_id"}
    a = send(client, "post", "/api/tickets", no_external_id).json()
    b = send(client, "post", "/api/tickets", no_external_id).json()
    assert a["id"] != b["id"] and a["external_id"] is None
    assert Ticket.objects.count() == 4


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({**NEW, "subject": "  "}, "subject", "must not be empty"),
        ({k: v for k, v in NEW.items() if k != "subject"}, "subject", "is required"),
        ({**NEW, "subject": "x" * 501}, "subject", "at most 500"),
        ({**NEW, "requester": {"email": "not-an-address"}}, "requester.email", "not an email"),
        ({**NEW, "requester": "ann@example.com"}, "requester", "object"),
        ({**NEW, "tags": ["ok", 3]}, "tags.1", "string"),
        ({**NEW, "tags": "late"}, "tags", "list of strings"),
        ({**NEW, "tags": [f"t{i}" for i in range(51)]}, "tags", "at most 50"),
        ({**NEW, "fields": ["customer_id"]}, "fields", "JSON object"),
        ({**NEW, "fields": {"x": "y" * 70_000}}, "fields", "64,000 bytes"),
        ({**NEW, "source": "Has Spaces"}, "source", "source name"),
        ({**NEW, "external_id": 100}, "external_id", "string"),
        ({**NEW, "body": 5}, "body", "string"),
    ],
)
def test_a_refused_body_is_422_naming_the_field_and_stores_nothing(
    people: dict, body: dict, field: str, words: str
) -> None:
    response = send(bearer(people["operator"]), "post", "/api/tickets", body)
    assert response.status_code == 422, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid_ticket" and error["field"] == field
    assert words in error["message"], error
    assert not Ticket.objects.exists()


def test_bodies_that_are_not_objects_are_400(people: dict) -> None:
    client = bearer(people["operator"])
    assert send(client, "post", "/api/tickets", "[1]").status_code == 400
    assert send(client, "post", "/api/tickets", "{bad").status_code == 400
    nan = send(client, "post", "/api/tickets", '{"subject": "x", "fields": {"a": NaN}}')
    assert nan.status_code == 400 and not Ticket.objects.exists()


def test_who_may_create_and_change_tickets(people: dict) -> None:
    ticket = make_ticket()
    assert send(Client(), "post", "/api/tickets", NEW).status_code == 401
    for name in ("approver", "nobody"):
        client = bearer(people[name])
        assert send(client, "post", "/api/tickets", NEW).status_code == 403, name
        assert send(client, "patch", f"/api/tickets/{ticket.pk}", {"queue": "x"}).status_code == 403
        url = f"/api/tickets/{ticket.pk}/messages"
        assert send(client, "post", url, {"body": "hi"}).status_code == 403
    assert bearer(people["approver"]).get(f"/api/tickets/{ticket.pk}").status_code == 200
    assert bearer(people["nobody"]).get("/api/tickets").status_code == 403
    assert send(bearer(people["admin"]), "post", "/api/tickets", NEW).status_code == 201
    assert Ticket.objects.count() == 2 and Ticket.objects.get(pk=ticket.pk).queue == ""


def test_patch_changes_only_what_it_names_and_merges_fields(people: dict) -> None:
    client = bearer(people["operator"])
    ticket = send(client, "post", "/api/tickets", NEW).json()
    url = f"/api/tickets/{ticket['id']}"
    changed = send(client, "patch", url, {"status": "solved", "fields": {"order_id": None, "x": 1}})
    assert changed.status_code == 200
    body = changed.json()
    assert body["status"] == "solved" and body["queue"] == "shipping"
    assert body["fields"] == {"customer_id": "C001", "x": 1}
    assert body["updated_at"] > ticket["updated_at"]
    body = send(client, "patch", url, {"tags": ["a"], "queue": "billing"}).json()
    assert (body["tags"], body["queue"], body["status"]) == (["a"], "billing", "solved")
    bad = send(client, "patch", url, {"status": "archived"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "status"
    assert send(client, "patch", "/api/tickets/999999", {"queue": "x"}).status_code == 404
    assert client.get("/api/tickets/999999").status_code == 404
    assert client.delete(url).status_code == 405


def test_messages_join_the_thread_and_reopen_a_ticket(people: dict) -> None:
    client = bearer(people["operator"])
    ticket = make_ticket(status="pending")
    url = f"/api/tickets/{ticket.pk}/messages"
    added = send(client, "post", url, {"body": "Still nothing."})
    assert added.status_code == 201, added.json()
    assert added.json()["ticket"] == ticket.pk and added.json()["direction"] == "in"
    again = send(client, "post", url, {"body": "Still nothing."})
    assert again.status_code == 200 and again.json()["id"] == added.json()["id"]
    ticket.refresh_from_db()
    assert ticket.status == "open"  # the customer wrote again
    out = send(client, "post", url, {"body": "We called them.", "direction": "out"})
    assert out.status_code == 201 and out.json()["author"] == "operator"
    assert [m.direction for m in ticket.thread()] == ["in", "in", "out"]
    empty = send(client, "post", url, {"body": " "})
    assert empty.status_code == 422 and empty.json()["error"]["field"] == "body"
    assert send(client, "post", "/api/tickets/999999/messages", {"body": "x"}).status_code == 404


def test_the_list_filters_searches_and_pages(people: dict) -> None:
    make_ticket("Parcel late", "Where is it", queue="shipping", tags=["vip"])
    make_ticket("Refund please", "Charged twice for a mug", source="email", status="pending")
    make_ticket("Hello", "Question", requester_email="zed@example.com", source="zendesk")
    client = bearer(people["operator"])

    def subjects(query: str) -> list[str]:
        response = client.get(f"/api/tickets?{query}")
        assert response.status_code == 200, response.json()
        return sorted(t["subject"] for t in response.json()["tickets"])

    assert subjects("queue=shipping") == ["Parcel late"]
    assert subjects("source=email") == ["Refund please"]
    assert subjects("status=pending") == ["Refund please"]
    assert subjects("tag=vip") == ["Parcel late"]
    assert subjects("q=charged+TWICE") == ["Refund please"]
    assert subjects("q=zed@") == ["Hello"]
    hello = Ticket.objects.get(subject="Hello")
    assert subjects(f"q=%23{hello.pk}") == ["Hello"]  # #id
    assert subjects("q=%C2%B2") == [] and subjects("q=99999999999999999999") == []
    assert len(subjects("limit=2")) == 2 and len(subjects("limit=2&offset=2")) == 1
    assert client.get("/api/tickets?status=lost").status_code == 400
    assert client.get("/api/tickets?limit=-1").status_code == 400


def test_twenty_identical_posts_at_once_make_one_ticket(people: dict, web: str) -> None:
    """20 real concurrent HTTP requests against a live server (Daphne, its own database
    connections): the database's unique constraint makes one ticket, one message."""
    from agentweb.accounts.models import ApiToken

    headers = {"Authorization": f"Bearer {ApiToken.issue(people['operator'])}"}

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=web, headers=headers, timeout=30) as client:
            return await asyncio.gather(
                *(client.post("/api/tickets", content=json.dumps(NEW)) for _ in range(20))
            )

    responses = asyncio.run(burst())
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 19 + [201], [r.text[:200] for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    assert Ticket.objects.count() == 1 and Message.objects.count() == 1


def test_the_document_describes_the_bodies_and_every_answer(people: dict) -> None:
    doc = Client().get("/api/openapi.json").json()
    paths = doc["paths"]
    create = paths["/api/tickets"]["post"]
    schema = create["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["subject"]
    assert set(schema["properties"]) == {
        "source", "external_id", "subject", "body", "requester", "queue", "tags", "fields",
    }  # fmt: skip
    assert schema["properties"]["requester"]["properties"]["email"]["type"] == "string"
    patch = paths["/api/tickets/{id}"]["patch"]["requestBody"]["content"]["application/json"]
    assert set(patch["schema"]["properties"]) == {"status", "queue", "tags", "fields"}
    assert set(doc["components"]["schemas"]["Ticket"]["required"]) <= KEYS
    # every error this file provokes is listed for its operation
    seen = {
        ("/api/tickets", "post"): {"400", "401", "403", "422"},
        ("/api/tickets", "get"): {"400", "403"},
        ("/api/tickets/{id}", "get"): {"404"},
        ("/api/tickets/{id}", "patch"): {"403", "404", "422"},
        ("/api/tickets/{id}/messages", "post"): {"403", "404", "422"},
    }
    for (path, method), codes in seen.items():
        assert codes <= set(paths[path][method]["responses"]), (path, method)
    refs = json.dumps(doc)
    for name in ("Ticket", "TicketMessage", "FieldError"):
        assert f"#/components/schemas/{name}" in refs
