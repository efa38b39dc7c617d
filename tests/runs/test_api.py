"""The JSON API of the contract: auth, errors, the permission matrix."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.runs import engine
from agentweb.runs.models import Approval, Run
from agentweb.runtime.testing import call


def bearer(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def post(client: Client, url: str, data: Any) -> Any:
    return client.post(url, data=json.dumps(data), content_type="application/json")


def test_it_needs_authentication(people) -> None:
    response = Client().get("/api/runs")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    bad = Client(HTTP_AUTHORIZATION="Bearer nope").get("/api/runs")
    assert bad.status_code == 401


def test_a_tokens_last_use_is_written_once_a_minute_not_per_request(people) -> None:
    from datetime import timedelta

    from django.utils import timezone

    client = bearer(people["operator"])
    token = ApiToken.objects.get(user=people["operator"])
    assert token.last_used_at is None
    assert client.get("/api/runs").status_code == 200
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    assert client.get("/api/runs").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == first  # within the minute: not written again
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - timedelta(minutes=2))
    assert client.get("/api/runs").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None and token.last_used_at > first - timedelta(seconds=1)
    assert token.last_used_at <= timezone.now()


def test_it_creates_and_reads_a_run(people, scripted, enqueued) -> None:
    client = bearer(people["operator"])
    response = post(client, "/api/runs", {"task": "Where is order A1?"})
    assert response.status_code == 201
    run = response.json()
    assert run["status"] == "queued"
    assert run["agent"] == "ticket-assistant"
    assert run["created_by"] == "operator"
    assert set(run) >= {
        "id",
        "status",
        "task",
        "agent",
        "final_answer",
        "created_by",
        "created_at",
        "finished_at",
        "usage",
    }
    assert enqueued == [run["id"]]
    scripted.enqueue(call("lookup", order_id="A1"), "Delivered.")
    engine.execute_run(run["id"])
    detail = client.get(f"/api/runs/{run['id']}").json()
    assert detail["status"] == "succeeded"
    assert detail["final_answer"] == "Delivered."
    events = client.get(f"/api/runs/{run['id']}/events?after=0").json()["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert set(events[0]) == {"seq", "type", "at", "data"}
    later = client.get(f"/api/runs/{run['id']}/events?after=3").json()["events"]
    assert [e["seq"] for e in later] == [e["seq"] for e in events[3:]]
    listed = client.get("/api/runs?status=succeeded&q=order A1").json()["runs"]
    assert [r["id"] for r in listed] == [run["id"]]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"task": ""}, 400, "invalid"),
        ({"task": 5}, 400, "invalid"),
        ({"task": "x", "agent": "nobody"}, 400, "invalid"),
        ({"task": "x", "ticket": 999999}, 404, "not_found"),
        ({"task": "x", "ticket": "7"}, 400, "invalid"),
        ([1, 2], 400, "invalid"),
    ],
)
def test_bad_input_gets_a_json_error(people, enqueued, body, status, code) -> None:
    response = post(bearer(people["operator"]), "/api/runs", body)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"]
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "task must not be empty"),
        ({"task": "   "}, "task must not be empty"),
        ({"task": None}, "task must be a string"),
        ({"task": "x", "agent": 3}, "agent must be a string"),
        ({"task": "x", "ticket": True}, "ticket must be an integer id"),
        ({"task": "x", "ticket": 7.5}, "ticket must be an integer id"),
    ],
)
def test_the_start_body_is_refused_with_words(people, enqueued, body, message) -> None:
    response = post(bearer(people["operator"]), "/api/runs", body)
    assert response.status_code == 400
    assert response.json()["error"] == {"code": "invalid", "message": message}
    assert not Run.objects.exists()


def test_a_ticket_alone_starts_a_run_as_the_document_says(people, enqueued) -> None:
    from django.utils import timezone

    from agentweb.shop.models import Customer
    from tests.tickets.factories import make_ticket

    now = timezone.now()
    customer = Customer.objects.create(
        code="C9", name="Ann", email="ann@example.com", created_at=now
    )
    ticket = make_ticket("Late", "Where is it?", customer=customer)
    body = Client().get("/api/openapi.json").json()["paths"]["/api/runs"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert "required" not in schema
    assert ["ticket"] in [branch["required"] for branch in schema["anyOf"]]
    assert set(schema["properties"]) == {"task", "agent", "ticket", "mode"}
    response = post(bearer(people["operator"]), "/api/runs", {"ticket": ticket.pk})
    assert response.status_code == 201, response.json()
    assert response.json()["task"].startswith(f"Handle ticket #{ticket.pk}: Late")


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({}, 400, "decision must be 'approve' or 'reject'"),
        ({"decision": "maybe"}, 400, "decision must be 'approve' or 'reject'"),
        ({"decision": "reject", "comment": 5}, 400, "comment must be a string"),
        ({"decision": "approve", "arguments": [1]}, 422, "arguments must be a JSON object"),
    ],
)
def test_the_decision_body_is_refused_with_words(people, body, status, message) -> None:
    from agentweb.runs import actions

    run = actions.do_create_run(user=people["operator"], task="x")
    approval = Approval.objects.create(
        run=run, call_id="c1", tool="pay_out", arguments={}, arguments_hash="h",
        risk="high", expires_at=actions.approval_expiry(),
    )  # fmt: skip
    response = post(bearer(people["approver"]), f"/api/approvals/{approval.pk}/decide", body)
    assert response.status_code == status
    assert response.json()["error"]["message"] == message
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_the_documented_bodies_are_the_parsers(people) -> None:
    from agentweb.runs.api_input import DecideApproval, StartRun

    doc = Client().get("/api/openapi.json").json()["paths"]
    decide = doc["/api/approvals/{id}/decide"]["post"]["requestBody"]["content"]
    assert decide["application/json"]["schema"]["required"] == ["decision"]
    assert decide["application/json"]["schema"]["properties"]["decision"]["enum"] == [
        "approve",
        "reject",
    ]
    for model, schema in [
        (StartRun, doc["/api/runs"]["post"]["requestBody"]["content"]["application/json"]),
        (DecideApproval, decide["application/json"]),
    ]:
        assert set(schema["schema"]["properties"]) == set(model.model_fields)


def test_malformed_json_and_bad_query_are_json_errors(people, enqueued) -> None:
    from agentweb.runs import actions

    client = bearer(people["operator"])
    run = actions.do_create_run(user=people["operator"], task="x")
    raw = client.post("/api/runs", data="{nope", content_type="application/json")
    assert raw.status_code == 400 and "JSON" in raw.json()["error"]["message"]
    assert client.get("/api/runs?status=nope").status_code == 400
    assert client.get(f"/api/runs/{run.pk}/events?after=x").status_code == 400
    assert client.get("/api/runs/424242").json()["error"]["code"] == "not_found"
    assert client.delete("/api/runs").status_code == 405


def test_session_auth_needs_csrf(people, enqueued) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["operator"])
    response = post(client, "/api/runs", {"task": "hello"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "csrf_failed"
    assert client.get("/api/runs").status_code == 200


def _waiting_run(people, scripted, owner: str) -> Approval:
    from agentweb.runs import actions

    scripted.enqueue(call("pay_out", order_id="A1", amount=30))
    run = actions.do_create_run(user=people[owner], task="refund A1")
    engine.execute_run(run.pk)
    return Approval.objects.get(run=run)


# (decider, run owner) -> expected status: approvers and admins decide others' runs only.
MATRIX = [
    ("operator", "operator", 403),
    ("operator", "approver", 403),
    ("approver", "approver", 403),
    ("approver", "operator", 200),
    ("admin", "admin", 403),
    ("admin", "operator", 200),
    ("approver", "admin", 200),
]


@pytest.mark.parametrize(("decider", "owner", "status"), MATRIX)
def test_the_permission_matrix(people, scripted, enqueued, decider, owner, status) -> None:
    approval = _waiting_run(people, scripted, owner)
    response = post(
        bearer(people[decider]), f"/api/approvals/{approval.pk}/decide", {"decision": "approve"}
    )
    assert response.status_code == status, response.json()
    approval.refresh_from_db()
    assert approval.status == ("approved" if status == 200 else "pending")


def test_decide_errors(people, scripted, enqueued) -> None:
    approval = _waiting_run(people, scripted, "operator")
    client = bearer(people["approver"])
    url = f"/api/approvals/{approval.pk}/decide"
    assert post(client, url, {"decision": "maybe"}).status_code == 400
    invalid = post(client, url, {"decision": "approve", "arguments": {"amount": "lots"}})
    assert invalid.status_code == 422
    assert invalid.json()["error"]["code"] == "invalid_arguments"
    assert post(client, url, {"decision": "approve", "arguments": [1]}).status_code == 422
    assert post(client, url, {"decision": "reject", "comment": "no"}).status_code == 200
    again = post(client, url, {"decision": "approve"})
    assert again.status_code == 409
    assert "already rejected" in again.json()["error"]["message"]
    listed = client.get("/api/approvals?status=rejected").json()["approvals"]
    assert [a["id"] for a in listed] == [approval.pk]
    assert set(listed[0]) >= {
        "id",
        "run",
        "call_id",
        "tool",
        "arguments",
        "risk",
        "status",
        "requested_at",
        "expires_at",
    }


def test_operators_see_only_their_runs_without_view_all(people, scripted, enqueued) -> None:
    from django.contrib.auth.models import Group, Permission

    from agentweb.runs import actions

    run = actions.do_create_run(user=people["operator"], task="mine")
    group = Group.objects.get(name="operator")
    group.permissions.remove(Permission.objects.get(codename="view_all_runs"))
    other = bearer(people["operator2"].__class__.objects.get(username="operator2"))
    assert other.get(f"/api/runs/{run.pk}").status_code == 404
    assert bearer(people["approver"]).get(f"/api/runs/{run.pk}").status_code == 200


def test_visible_to_and_as_json(people, enqueued) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    from agentweb.runs import actions
    from agentweb.runs.models import RunJson

    mine = actions.do_create_run(user=people["operator"], task="mine")
    theirs = actions.do_create_run(user=people["approver"], task="theirs")
    group = Group.objects.get(name="operator")
    group.permissions.remove(Permission.objects.get(codename="view_all_runs"))
    operator = get_user_model().objects.get(username="operator")  # permissions read afresh
    assert list(Run.objects.visible_to(operator)) == [mine]
    assert set(Run.objects.visible_to(people["approver"])) == {mine, theirs}
    doc = Run.objects.visible_to(people["approver"]).get(pk=mine.pk).as_json()
    assert set(doc) == set(RunJson.__annotations__)
    assert (doc["id"], doc["task"], doc["created_by"]) == (mine.pk, "mine", "operator")


def test_cancel_via_api(people, scripted, enqueued) -> None:
    approval = _waiting_run(people, scripted, "operator")
    client = bearer(people["operator"])
    response = client.post(f"/api/runs/{approval.run_id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert client.post(f"/api/runs/{approval.run_id}/cancel").status_code == 409


def test_the_openapi_document_lists_the_contract(people) -> None:
    doc = Client().get("/api/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for path in [
        "/api/runs",
        "/api/runs/{id}",
        "/api/runs/{id}/events",
        "/api/runs/{id}/cancel",
        "/api/tickets",
        "/api/approvals",
        "/api/approvals/{id}/decide",
    ]:
        assert path in doc["paths"]


def test_issue_token_prints_a_working_token(people, capsys) -> None:
    call_command("issue_token", "approver")
    token = capsys.readouterr().out.strip().splitlines()[-1]
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/approvals")
    assert response.status_code == 200


def test_every_request_body_in_the_document_is_the_model_its_endpoint_parses_with(people) -> None:
    from agentweb.runs import api_input, strict_input, suites

    parsers = {
        ("/api/runs", "post"): api_input.StartRun,
        ("/api/approvals/{id}/decide", "post"): api_input.DecideApproval,
        ("/api/agents", "post"): api_input.CreateProfile,
        ("/api/agents/{name}", "put"): api_input.ReplaceProfile,
        ("/api/agents/{name}", "patch"): api_input.ChangeProfile,
        ("/api/runs/{id}/fork", "post"): strict_input.ForkRun,
        ("/api/suites/{name}/experiments", "post"): suites.StartExperiment,
    }
    from agentweb.tickets import api_input as ticket_input

    ticket_parsers = {  # nested models (the requester; a suite's cases) inline
        ("/api/suites", "post"): suites.CreateSuite,
        ("/api/tickets", "post"): ticket_input.CreateTicket,
        ("/api/tickets/{id}", "patch"): ticket_input.ChangeTicket,
        ("/api/tickets/{id}/messages", "post"): ticket_input.AddMessage,
    }
    from agentweb.mcpservers.api_input import AddServer

    parsers[("/api/mcp-servers", "post")] = AddServer
    doc = Client().get("/api/openapi.json").json()
    bodies = {
        (path, method): spec["requestBody"]
        for path, item in doc["paths"].items()
        for method, spec in item.items()
        if isinstance(spec, dict) and "requestBody" in spec
    }
    assert set(bodies) == set(parsers) | set(ticket_parsers)
    for where, ticket_model in ticket_parsers.items():
        schema = bodies[where]["content"]["application/json"]["schema"]
        assert schema == ticket_input.request_schema(ticket_model), where
        refs = re.findall(r"'\$ref': '([^']*)'", str(schema))
        assert set(refs) <= {"#/components/schemas/Json"} and "$defs" not in schema
    for where, model in parsers.items():
        schema = bodies[where]["content"]["application/json"]["schema"]
        assert schema == api_input.request_schema(model), where
        assert schema == _untitled(model.model_json_schema()), where
    # every write that takes a body documents it (cancel takes none)
    writes = {
        (path, method)
        for path, item in doc["paths"].items()
        for method in item
        if method in ("post", "put", "patch") and not path.endswith("/cancel")
    }
    assert writes == set(parsers) | set(ticket_parsers)


def _untitled(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untitled(v) for k, v in value.items() if k != "title"}
    if isinstance(value, list):
        return [_untitled(v) for v in value]
    return value


def test_a_method_not_allowed_says_which_are_on_every_api_path(people) -> None:
    """RFC 9110: a 405 carries Allow, listing what the path answers; here exactly the
    methods the document lists for it (so the document misses none the server takes)."""
    doc = Client().get("/api/openapi.json").json()
    client = bearer(people["admin"])
    paths = {**doc["paths"], "/api/openapi.json": {"get": {}}}
    for template, item in paths.items():
        url = template.replace("{id}", "1").replace("{name}", "x").replace("{n}", "1")
        documented = {m.upper() for m in item if m in ("get", "post", "put", "patch", "delete")}
        others = {"GET", "POST", "PUT", "PATCH", "DELETE"} - documented
        for method in ("TRACE", "OPTIONS", *sorted(others)):
            response = client.generic(method, url)
            assert response.status_code == 405, (method, url)
            assert response.json()["error"]["code"] == "method_not_allowed"
            allowed = {m.strip() for m in response["Allow"].split(",")}
            assert allowed == documented, (method, url, allowed)
