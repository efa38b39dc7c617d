"""Property-based fuzzing of every operation in /api/openapi.json.

Every path, query parameter and body field the document declares is filled with hostile
values (NUL, lone surrogates, NaN/Infinity/1e999, 64-bit overflows, nesting 1,000 deep,
odd ids and dates); raw hostile bodies are sent too. The property: never a 5xx, and every
error under /api/ is ``{"error": {"code", "message"}}`` JSON."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hardening.hostile import dumps, hostile_json, odd_ids, odd_text

RAW_BODIES = [
    b"not json",
    b"\xff\xfe\x00",
    b"[" * 1000 + b"]" * 1000,
    b'{"task": NaN}',
    b'{"task": "x", "ticket": 1e999}',
    b'{"task": "\\u0000"}',
    b'{"task": "\\ud800"}',
    b'{"task": "ok", "agent": "\\udfff"}',
    b'{"decision": "approve", "arguments": {"amount": Infinity}}',
    b'{"task": "x", "ticket": 99999999999999999999999}',
    b"[]",
    b"null",
    b'"string"',
]


@pytest.fixture
def api(db: None, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from django.core.management import call_command

    from agentweb.accounts.models import ApiToken
    from agentweb.runs import queue

    monkeypatch.setenv("AGENTWEB_DEMO_PASSWORD", "demo-pass-123")
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: None)  # no broker in this test
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    tokens = {name: ApiToken.issue(users.get(username=name)) for name in ("operator", "admin")}
    client = Client(raise_request_exception=False)
    doc = client.get("/api/openapi.json").json()
    operations = [
        (path, method.upper(), spec)
        for path, item in doc["paths"].items()
        for method, spec in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    return {"client": client, "tokens": tokens, "operations": operations}


def check(response: Any, what: str) -> None:
    assert response.status_code < 500, (
        f"{what} -> {response.status_code}: {response.content[:300]!r}"
    )
    if response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), what
        body = json.loads(response.content)
        assert set(body["error"]) >= {"code", "message"}, (what, body)
        assert body["error"]["message"], what


def send(api: dict[str, Any], method: str, url: str, body: bytes | None, who: str) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api['tokens'][who]}"}
    client: Client = api["client"]
    if body is None:
        return client.generic(method, url, **headers)
    return client.generic(method, url, body, content_type="application/json", **headers)


def _path(template: str, value: str) -> str:
    encoded = quote(value.encode("utf-8", "surrogatepass"), safe="")
    return re.sub(r"\{[a-z_]+\}", lambda _: encoded, template)


def _query(params: dict[str, str]) -> str:
    return "&".join(
        f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}"
        for k, v in params.items()
    )


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_operation_survives_hostile_input(api: dict[str, Any], data: Any) -> None:
    path, method, spec = data.draw(st.sampled_from(api["operations"]), label="operation")
    url = path
    if "{" in path:
        url = _path(path, data.draw(odd_ids | odd_text, label="id"))
    query = {}
    for param in spec.get("parameters", []):
        if param.get("in") == "query" and data.draw(st.booleans(), label="send " + param["name"]):
            query[param["name"]] = data.draw(odd_text | odd_ids, label=param["name"])
    if query:
        url += "?" + _query(query)
    body = None
    schema = (
        spec.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    )
    if schema is not None or method in ("POST", "PUT"):
        if data.draw(st.booleans(), label="raw body"):
            body = data.draw(st.sampled_from(RAW_BODIES), label="body")
        else:
            fields = list((schema or {}).get("properties", {})) or ["task"]
            value = data.draw(
                st.fixed_dictionaries({}, optional={f: hostile_json for f in fields}), label="body"
            )
            body = dumps(value).encode("utf-8", "surrogatepass")
    who = data.draw(st.sampled_from(["operator", "admin"]), label="user")
    check(send(api, method, url, body, who), f"{method} {url} {body!r:.200}")


def test_api_errors_are_json(api: dict[str, Any]) -> None:
    client: Client = api["client"]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api['tokens']['operator']}"}
    cases = [
        (client.get("/api/nope", **auth), 404),
        (client.get("/api/runs/999999999", **auth), 404),
        (client.get("/api/runs/99999999999999999999999", **auth), 404),
        (client.delete("/api/runs", **auth), 405),
        (client.get("/api/runs/1/cancel", **auth), 405),
        (client.get("/api/runs"), 401),
        (
            client.post(
                "/api/runs",
                b'{"task": "' + b"x" * 1_100_000 + b'"}',
                content_type="application/json",
                **auth,
            ),
            413,
        ),
        (client.post("/api/runs", b'{"task": NaN}', content_type="application/json", **auth), 400),
        (client.get("/api/runs?q=a%00b", **auth), 400),
    ]
    for response, status in cases:
        assert response.status_code == status, (status, response.content[:200])
        check(response, str(status))
    deep = client.post(
        "/api/runs", b"[" * 1000 + b"]" * 1000, content_type="application/json", **auth
    )
    assert deep.status_code == 400
    assert "nested too deeply" in deep.json()["error"]["message"]
    nan = client.post(
        "/api/runs", b'{"task": "x", "ticket": 1e999}', content_type="application/json", **auth
    )
    assert "out of range" in nan.json()["error"]["message"]
    nul = client.post(
        "/api/runs", b'{"task": "a\\u0000b"}', content_type="application/json", **auth
    )
    assert nul.status_code == 400 and "NUL" in nul.json()["error"]["message"]
    surrogate = client.post(
        "/api/runs", b'{"task": "a\\ud800b"}', content_type="application/json", **auth
    )
    assert surrogate.status_code == 400 and "surrogate" in surrogate.json()["error"]["message"]


def test_form_bodies_to_the_api_are_refused_with_json(api: dict[str, Any]) -> None:
    client: Client = api["client"]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {api['tokens']['admin']}"}
    multipart = [
        client.post("/api/runs", {"task": "Where is my order?"}, **auth),
        client.post("/api/runs", {"task": "x", "ticket": "²"}, **auth),
        client.post("/api/agents", {"name": "x", "system_prompt": "p"}, **auth),
    ]
    for response in multipart:
        check(response, "multipart")
        assert response.status_code == 415, response.content
        assert "application/json" in response.json()["error"]["message"]
    # PUT and PATCH bodies are never parsed as forms: a form is not JSON.
    field = b'--x\r\nContent-Disposition: form-data; name="name"\r\n\r\nv\r\n--x--\r\n'
    for method in ("put", "patch"):
        response = getattr(client, method)(
            "/api/agents/ticket-assistant",
            field,
            content_type="multipart/form-data; boundary=x",
            **auth,
        )
        check(response, method)
        assert response.status_code == 400, response.content
        assert "not valid JSON" in response.json()["error"]["message"]
    # A JSON text sent as a urlencoded form (curl -d without a Content-Type) is still read.
    sent = client.post(
        "/api/runs",
        '{"task": "Where is order A1001?"}',
        content_type="application/x-www-form-urlencoded",
        **auth,
    )
    assert sent.status_code == 201, sent.content
    # The profile API refuses a digit that is not ASCII by field (it gave a 500).
    for selection in ("²", "٣", "７", "1e3", "0", "101", True):
        body = {"name": "digits", "system_prompt": "p", "tool_selection": selection}
        made = client.post("/api/agents", json.dumps(body), content_type="application/json", **auth)
        check(made, repr(selection))
        assert made.status_code == 422, (selection, made.content)
        assert "tool_selection" in made.content.decode(), made.content


def test_digits_of_other_scripts_are_text_not_ids(api: dict[str, Any]) -> None:
    """A search for "²" gave a 500: "²".isdigit() is true and int("²") raises."""
    for q in ("²", "#²", "٣", "¹²", "７"):
        response = send(api, "GET", "/api/tickets?q=" + quote(q), None, "operator")
        check(response, q)
        assert response.status_code == 200, (q, response.content)


def test_database_down_is_503_json(api: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import OperationalError

    from agentweb.runs.models import RunQuerySet

    def down(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError('connection to server at "127.0.0.1", port 5432 failed')

    monkeypatch.setattr(RunQuerySet, "visible_to", down)
    response = send(api, "GET", "/api/runs", None, "operator")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "unavailable"
    assert response["Retry-After"]
