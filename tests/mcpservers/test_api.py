"""``/api/mcp-servers``: admins only, bodies read by one pydantic model that the OpenAPI
document is made from, env and header values never given back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.mcpservers.api_input import AddServer
from agentweb.mcpservers.models import McpServer
from agentweb.runs.api_input import request_schema
from agentweb.runs.models import AuditEntry

SECRET = "sk-live-do-not-show-42"


def client_for(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def post(client: Client, body: Any) -> Any:
    return client.post("/api/mcp-servers", json.dumps(body), content_type="application/json")


@pytest.fixture
def admin(people: dict[str, Any]) -> Client:
    return client_for(people["admin"])


def test_it_adds_lists_shows_and_removes_servers(admin: Client, asked: list[str]) -> None:
    stdio = post(
        admin, {"name": "crm", "command": "crm-mcp --port 0", "env": {"CRM_TOKEN": SECRET}}
    )
    assert stdio.status_code == 201, stdio.content
    assert stdio.json() == {
        "name": "crm",
        "transport": "stdio",
        "command": "crm-mcp --port 0",
        "env": ["CRM_TOKEN"],
        "state": "new",
        "tools": [],
        "error": None,
        "checked_at": None,
    }
    http = post(
        admin,
        {
            "name": "billing",
            "url": "https://user:pw@billing.example/mcp",
            "headers": {"Authorization": f"Bearer {SECRET}"},
        },
    )
    assert http.status_code == 201, http.content
    assert http.json()["url"] == "https://***@billing.example/mcp"
    assert http.json()["headers"] == ["Authorization"]
    assert asked == ["crm", "billing"]  # a worker is asked to contact each
    listed = admin.get("/api/mcp-servers")
    assert [s["name"] for s in listed.json()["servers"]] == ["billing", "crm"]
    assert admin.get("/api/mcp-servers/crm").json()["command"] == "crm-mcp --port 0"
    every_answer = listed.content + stdio.content + http.content
    assert SECRET.encode() not in every_answer and b"pw@" not in every_answer
    audit = json.dumps([a.data for a in AuditEntry.objects.filter(action="mcp_server_added")])
    assert SECRET not in audit and "CRM_TOKEN" in audit
    assert admin.delete("/api/mcp-servers/crm").status_code == 204
    assert admin.get("/api/mcp-servers/crm").status_code == 404
    assert McpServer.objects.filter(name="crm").count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "bad__name", "command": "x"}, "name"),
        ({"name": "9lives", "command": "x"}, "name"),
        ({"name": "a", "command": "x", "url": "https://a.example"}, "command"),
        ({"name": "a"}, "command"),
        ({"name": "a", "command": "x 'unclosed"}, "command"),
        ({"name": "a", "url": "ftp://a.example"}, "url"),
        ({"name": "a", "url": "https://a.example", "env": {"K": "v"}}, "env"),
        ({"name": "a", "command": "x", "headers": {"K": "v"}}, "headers"),
        ({"name": "a", "command": "x", "env": {"1BAD": "v"}}, "env"),
        (
            {"name": "a", "url": "https://a.example", "headers": {"X": "a\r\nInjected: 1"}},
            "headers",
        ),
        ({"name": "a", "url": "https://a.example", "headers": {"Mcp-Session-Id": "s"}}, "headers"),
        ({"name": "a", "command": "x", "env": {"K": 5}}, "env"),
        ({"name": "a", "command": "x", "header": {"K": "v"}}, "header"),
        ({"name": 5, "command": "x"}, "name"),
    ],
)
def test_an_entry_that_cannot_work_is_refused_naming_the_field(
    admin: Client, body: dict[str, Any], field: str
) -> None:
    answer = post(admin, body)
    assert answer.status_code == 422, answer.content
    error = answer.json()["error"]
    assert error["code"] == "invalid_server"
    assert field in error["details"], error
    assert McpServer.objects.count() == 0


def test_a_name_taken_is_a_conflict(admin: Client) -> None:
    assert post(admin, {"name": "crm", "command": "a"}).status_code == 201
    again = post(admin, {"name": "crm", "url": "https://b.example/mcp"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"


def test_only_admins_see_or_change_servers(people: dict[str, Any]) -> None:
    for who in ("operator", "approver"):
        client = client_for(people[who])
        assert client.get("/api/mcp-servers").status_code == 403
        assert post(client, {"name": "x", "command": "y"}).status_code == 403
    assert McpServer.objects.count() == 0
    anonymous = Client().get("/api/mcp-servers")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"]


def test_bad_json_is_a_json_400(admin: Client) -> None:
    answer = admin.post("/api/mcp-servers", "{nope", content_type="application/json")
    assert answer.status_code == 400 and "error" in answer.json()


def test_the_openapi_document_describes_the_endpoints_from_the_same_model(admin: Client):
    doc = admin.get("/api/openapi.json").json()
    post_op = doc["paths"]["/api/mcp-servers"]["post"]
    body = post_op["requestBody"]["content"]["application/json"]["schema"]
    assert body == request_schema(AddServer)
    assert body["additionalProperties"] is False and "env" in body["properties"]
    assert set(doc["paths"]["/api/mcp-servers/{name}"]) >= {"get", "delete"}
    assert "McpServer" in doc["components"]["schemas"]
    assert "/api/runs" in doc["paths"]  # the rest of the API is still there
