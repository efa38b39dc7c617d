"""Hostile input through the pages, their forms and the import: never a 5xx;
a clear message on the page (the form's error, or the app's 400 page)."""

from __future__ import annotations

import io
import json
import time
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentweb.accounts.roles import ensure_roles
from agentweb.runs import queue
from tests.hardening.hostile import DEEP, JSON_FIELD_TEXTS, NUMBER_TEXTS, odd_ids, odd_text
from tests.web import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: None)
    user = User.objects.create_user("operator", password="pw-123456789")
    user.groups.add(ensure_roles()["operator"])
    from agentweb.runs.models import AgentProfile

    AgentProfile.objects.get_or_create(name="ticket-assistant", defaults={"system_prompt": "Hi"})
    client = Client(raise_request_exception=False)
    client.force_login(user)
    client.user = user  # type: ignore[attr-defined]
    return client


@pytest.fixture
def admin() -> Client:
    user = User.objects.create_user("admin", password="pw-123456789")
    user.groups.add(ensure_roles()["admin"])
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def _encode(params: dict[str, str]) -> str:
    # As a browser would send them: UTF-8, a lone surrogate as its (invalid) UTF-8 bytes.
    return "&".join(
        f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}"
        for k, v in params.items()
    )


def get(client: Client, path: str, params: dict[str, str]) -> Any:
    return client.get(f"{path}?{_encode(params)}")


def post(client: Client, path: str, params: dict[str, str]) -> Any:
    return client.post(path, _encode(params), content_type="application/x-www-form-urlencoded")


def ok(response: Any, what: str) -> str:
    assert response.status_code < 500, f"{what} -> {response.status_code}"
    return response.content.decode()


def test_nul_in_a_form_is_refused_with_a_message(operator: Client) -> None:
    response = operator.post("/runs/new/", {"task": "Order A1001 a\x00b"})
    assert response.status_code == 400
    assert "NUL character" in response.content.decode()
    assert "task" in response.content.decode()
    response = operator.get("/runs/", {"q": "x\x00"})
    assert response.status_code == 400 and "NUL" in response.content.decode()


def test_dates_out_of_range_are_a_form_error(operator: Client) -> None:
    for query in ({"until": "9999-12-31"}, {"since": "0001-01-01"}, {"until": "99999-01-01"}):
        body = ok(operator.get("/runs/", query), str(query))
        assert "Pick a date between" in body or "Enter a valid date" in body, query


def test_odd_ids(operator: Client) -> None:
    for a in ("²", "٣", "-1", "99999999999999999999999", "1e3", "0x1"):
        ok(operator.get("/runs/compare/", {"a": a, "b": "1"}), a)
    for path in ("/runs/99999999999999999999/", "/runs/0/", "/runs/99999999999999999999/replay/"):
        assert operator.get(path).status_code == 404, path


def test_edited_arguments_with_nan_are_refused(operator: Client) -> None:
    approver = User.objects.create_user("approver", password="pw-123456789")
    approver.groups.add(ensure_roles()["approver"])
    run = f.make_run(operator.user)  # type: ignore[attr-defined]
    approval = f.request_approval(run)
    client = Client(raise_request_exception=False)
    client.force_login(approver)
    for arguments in (
        '{"order_id": "A1001", "amount": NaN, "reason": "x"}',
        '{"order_id": "A1001", "amount": 1e999, "reason": "x"}',
        '{"order_id": "A1001", "amount": 5, "reason": "\\u0000"}',
        DEEP,
    ):
        response = client.post(
            f"/approvals/{approval.pk}/decide/",
            {"decision": "edit", "arguments": arguments},
            HTTP_HX_REQUEST="true",
        )
        body = ok(response, arguments[:30])
        assert "The edited arguments" in body, body[:500]
    approval.refresh_from_db()
    assert approval.status == "pending"


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_forms_survive_hostile_values(operator: Client, data: Any) -> None:
    fields = ["q", "tool", "status", "agent", "requester", "since", "until", "page"]
    query = {
        name: data.draw(odd_text | odd_ids, label=name)
        for name in fields
        if data.draw(st.booleans(), label=f"send {name}")
    }
    ok(get(operator, "/runs/", query), f"/runs/ {query!r}")
    task = data.draw(odd_text, label="task")
    ok(post(operator, "/runs/new/", {"task": task}), f"new {task!r}")
    ok(get(operator, "/tickets/", {"status": data.draw(odd_text, label="status")}), "tickets")
    ids = {"a": data.draw(odd_ids | odd_text, label="a"), "b": data.draw(odd_ids, label="b")}
    ok(get(operator, "/runs/compare/", ids), f"compare {ids!r}")


# --- the agent profile form --------------------------------------------------------------

LIST_FIELDS = ("allowed_tools", "delegates")
OBJECT_FIELDS = ("risk_overrides", "approval_policies")


def profile_form(**overrides: str) -> dict[str, str]:
    return {
        "name": "fuzzed",
        "description": "",
        "model": "",
        "system_prompt": "Be brief.",
        "allowed_tools": '["get_order"]',
        "tool_selection": "all",
        "validator": "",
        "max_iterations": "5",
        "risk_overrides": "{}",
        "approval_policies": "{}",
        "delegates": "[]",
        "context_budget_tokens": "8000",
        "vision": "on",
        **overrides,
    }


def field_block(body: str, field: str) -> str:
    start = body.index(f'id="field-{field}"')
    end = body.find('<div class="field', start + 10)
    return body[start : end if end > 0 else len(body)]


def refused_in_field(response: Any, field: str, what: str) -> str:
    body = ok(response, what)
    assert response.status_code == 422, (what, response.status_code)
    block = field_block(body, field)
    assert 'class="error"' in block, (what, block[:400])
    return block


JSON_CASES = [
    (field, text)
    for field in LIST_FIELDS + OBJECT_FIELDS
    for text in JSON_FIELD_TEXTS
    if not (field in LIST_FIELDS and text == "[]") and not (field in OBJECT_FIELDS and text == "{}")
]


@pytest.mark.parametrize(
    ("field", "text"), JSON_CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(JSON_CASES)]
)
def test_profile_json_fields_refuse_hostile_json_under_the_field(
    admin: Client, field: str, text: str
) -> None:
    from agentweb.runs.models import AgentProfile

    what = f"{field}={text[:40]!r}"
    refused_in_field(post(admin, "/agents/new/", profile_form(**{field: text})), field, what)
    assert not AgentProfile.objects.filter(name="fuzzed").exists(), what
    profile = AgentProfile.objects.create(name="kept", system_prompt="p")
    refused_in_field(
        post(admin, f"/agents/{profile.pk}/", profile_form(**{field: text})), field, what
    )
    profile.refresh_from_db()
    assert profile.allowed_tools == [] and profile.risk_overrides == {}, what


def test_profile_json_errors_say_what_is_wrong(admin: Client) -> None:
    said = {
        "[" * 1000 + "]" * 1000: "nested too deeply",
        '["\\ud800"]': "unpaired surrogate",
        '{"get_order": "a\\u0000"}': "NUL",
        "[Infinity]": "not a JSON number",
        "not json": "not valid JSON",
        "[1, 2]": "must be a list of names",
    }
    for text, words in said.items():
        block = refused_in_field(
            post(admin, "/agents/new/", profile_form(allowed_tools=text)), "allowed_tools", text
        )
        assert words in block.replace("&#x27;", "'"), (text, block[:400])


def test_a_refused_json_field_does_not_hide_the_others(admin: Client) -> None:
    """The JSON a field refused is left out and the rest read as the API reads them: the
    types (tool_selection, a whole number), or else the profile's rules (1 to 200)."""
    bad_json = '["\\ud800"]'
    for others, fields in (
        ({"tool_selection": "²", "max_iterations": "x"}, ("tool_selection", "max_iterations")),
        ({"max_iterations": "0"}, ("max_iterations",)),
    ):
        response = post(admin, "/agents/new/", profile_form(allowed_tools=bad_json, **others))
        for field in ("allowed_tools", *fields):
            refused_in_field(response, field, f"{field} with {others}")


@pytest.mark.parametrize("field", ["tool_selection", "max_iterations", "context_budget_tokens"])
@pytest.mark.parametrize("text", NUMBER_TEXTS)
def test_profile_numbers_are_ascii_whole_numbers(admin: Client, field: str, text: str) -> None:
    from agentweb.runs.models import AgentProfile

    response = post(admin, "/agents/new/", profile_form(**{field: text}))
    body = ok(response, f"{field}={text!r}")
    made = AgentProfile.objects.filter(name="fuzzed").first()
    if response.status_code == 302:  # a plain whole number (or blank: "all"), in range
        assert made is not None
        assert text.strip().isascii() and (text.strip().isdecimal() or text == ""), text
        assert made.top_n is None or 1 <= made.top_n <= 100
    else:
        assert made is None
        refused_in_field(response, field, f"{field}={text!r}")
        assert "Traceback" not in body
    if text in ("²", "٣", "¹²", "７", "1e3", "0x10"):
        assert made is None, f"{field}={text!r} was saved"


# --- the import --------------------------------------------------------------------------


def export(events: list[Any], **run: Any) -> str:
    return json.dumps(
        {
            "schema": "agentweb.run-export/1",
            "run": {"id": 1, "task": "t", "model": "demo", **run},
            "events": events,
        }
    )


def event(seq: Any, at: Any = "2026-01-01T00:00:00+00:00", **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": "model_called", "at": at, "data": {"text": "hi", **data}}


def upload(client: Client, content: bytes | str) -> tuple[int, str, float]:
    raw = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content
    file = io.BytesIO(raw)
    file.name = "run.json"
    started = time.monotonic()
    response = client.post("/runs/import/", {"file": file})
    return response.status_code, response.content.decode(), time.monotonic() - started


IMPORT_CASES = {
    "NaN": export([event(1)]).replace('"hi"', "NaN"),
    "Infinity": export([event(1)]).replace('"hi"', "-Infinity"),
    "1e999": export([event(1)]).replace('"hi"', "1e999"),
    "huge int seq": export([event(1)]).replace('"seq": 1', '"seq": ' + "9" * 5000),
    "seq 1e999": export([event(1)]).replace('"seq": 1', '"seq": 1e999'),
    "seq text": export([event("1")]),
    "nesting": export([event(1)]).replace('"hi"', DEEP),
    "surrogate": export([event(1)]).replace('"hi"', '"\\ud800"'),
    "NUL": export([event(1)]).replace('"hi"', '"a\\u0000b"'),
    "binary": b"\xff\xfe\x00\x01",
}


def compacted(**data: Any) -> dict[str, Any]:
    base = {"tokens_before": 900, "tokens_after": 300, "budget": 500, "actions": []}
    return {"seq": 1, "type": "context_compacted", "at": None, "data": {**base, **data}}


# Events whose data has a shape the runtime never writes (the import reads each type's
# data with the runtime's event shapes, agentweb/runtime/events.py).
IMPORT_CASES.update(
    {
        "compacted actions dict": export([compacted(actions={"digested": ["c1"]})]),
        "compacted actions nested": export([compacted(actions=[["digested"]])]),
        "compacted actions numbers": export([compacted(actions=[1, 2])]),
        "compacted actions text": export([compacted(actions="digested")]),
        "compacted tokens text": export([compacted(tokens_before="many")]),
        "tool_calls dict": export([event(1, tool_calls={"id": "c1", "name": "get_order"})]),
        "tool_calls nested": export([event(1, tool_calls=[["get_order"]])]),
        "tool_calls numbers": export([event(1, tool_calls=[1])]),
        "tool_calls name number": export([event(1, tool_calls=[{"id": "c1", "name": 7}])]),
        "tool_calls no name": export([event(1, tool_calls=[{"id": "c1", "arguments": {}}])]),
        "tool_calls id list": export([event(1, tool_calls=[{"id": [], "name": "get_order"}])]),
        "tool_calls text": export([event(1, tool_calls="get_order")]),
        "model_called tokens": export([event(1, tokens=[1, 2])]),
        "model_called text dict": export([event(1, text={"a": 1})]),
        "tool started call_id": export(
            [{"seq": 1, "type": "tool_call_started", "data": {"call_id": {}, "tool": "x"}}]
        ),
        "tool finished ok text": export(
            [{"seq": 1, "type": "tool_call_finished", "data": {"call_id": "c", "ok": "yes"}}]
        ),
        "subtask id text": export(
            [{"seq": 1, "type": "subtask_started", "data": {"task_id": "x", "agent": "a"}}]
        ),
        "run_finished usage list": export(
            [{"seq": 1, "type": "run_finished", "data": {"final_answer": "x", "usage": [1]}}]
        ),
    }
)
SHOWN_CASES = {
    "at 9999": export([event(1, "9999-12-31T23:59:59+00:00"), event(2, "0001-01-01T00:00:00")]),
    "at mixed": export([event(1, "2026-01-01T00:00:00"), event(2, "2026-01-01T00:00:01+05:00")]),
    "at odd": export([event(1, 12), event(2, None), event(3, "+999999-01-01"), event(4, [1])]),
}


@pytest.mark.parametrize("case", sorted(IMPORT_CASES))
def test_import_refuses_hostile_files_with_a_message(operator: Client, case: str) -> None:
    status, body, _ = upload(operator, IMPORT_CASES[case])
    assert status == 422, (case, status)
    assert 'class="error"' in body, (case, body[:300])


def test_an_import_refusal_names_the_event_and_the_field(operator: Client) -> None:
    status, body, _ = upload(operator, IMPORT_CASES["tool_calls name number"])
    assert status == 422
    assert "event 0 (model_called)" in body and "tool_calls[0].name" in body, body[:2000]
    status, body, _ = upload(operator, IMPORT_CASES["compacted actions dict"])
    assert "event 0 (context_compacted)" in body and "actions" in body, body[:2000]


@pytest.mark.parametrize("case", sorted(SHOWN_CASES))
def test_import_shows_files_with_odd_times(operator: Client, case: str) -> None:
    status, body, _ = upload(operator, SHOWN_CASES[case])
    assert status == 200, (case, status)
    assert 'id="event-1"' in body, (case, body[:300])


def test_import_caps_events_and_bytes_quickly(operator: Client) -> None:
    many = export([event(i) for i in range(1, 10_002)])
    status, body, seconds = upload(operator, many)
    assert status == 422 and "10,001 events" in body and "at most 10,000" in body
    assert seconds < 2, seconds
    big = export([event(1, text="x" * 10_000_001)])
    status, body, seconds = upload(operator, big)
    assert status == 422 and "larger than 10 MB" in body
    assert seconds < 2, seconds
