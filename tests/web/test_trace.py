"""The trace shows what the model was really given (DESIGN §16, issue 26.5): each model
call's messages and tool specs are stored with its event (runtime.trace) and shown on the
run page, the rendered system prompt included."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from agentweb.runs import actions, engine, queue
from agentweb.runs.models import RunEvent
from agentweb.runtime import trace
from tests.web.factories import emit, make_run, model_called

pytestmark = pytest.mark.django_db(transaction=True)  # the run's tools use other threads


@pytest.fixture
def operator(monkeypatch: pytest.MonkeyPatch) -> User:
    monkeypatch.setenv("AGENTWEB_DEMO_PASSWORD", "pw-12345678")
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: None)
    return User.objects.get(username="operator")


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_each_model_call_shows_the_messages_and_tool_specs_it_was_sent(operator: User) -> None:
    run = actions.do_create_run(user=operator, task="Where is order A1001?")
    engine.execute_run(run.pk)
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    prompt = next(e.data for e in events if e.type == "run_started")["system_prompt"]
    calls = [e for e in events if e.type == "model_called"]
    assert len(calls) >= 2 and all("sent" in e.data for e in calls)
    client = _client(operator)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    for call in calls:
        url = f"/runs/{run.pk}/sent/{call.seq}/"
        assert f'hx-get="{url}"' in page and "Messages and tool specs sent" in page
    first = client.get(f"/runs/{run.pk}/sent/{calls[0].seq}/", HTTP_HX_REQUEST="true")
    body = first.content.decode()
    assert first.status_code == 200 and "<html" not in body  # a fragment for the page
    # the rendered prompt as sent, then the task; the tool specs with their schemas
    assert body.index('class="sent-msg role-system"') < body.index('class="sent-msg role-user"')
    assert "Where is order A1001?" in body
    escaped = prompt.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped.replace("'", "&#x27;").replace('"', "&quot;")[:200] in body
    assert "<code>get_order</code>" in body and "&quot;order_id&quot;" in body
    # the second call was sent the first call's reply and its tool's result
    second = client.get(f"/runs/{run.pk}/sent/{calls[1].seq}/").content.decode()
    assert "<html" in second and "What model turn 2 was sent" in second  # a page of its own
    first_calls = calls[0].data["tool_calls"]
    assert first_calls and f"result of {first_calls[0]['id']}" in second
    assert 'class="sent-msg role-assistant"' in second and 'class="sent-msg role-tool"' in second
    # what the page shows is what the store holds, resolved
    resolved = trace.resolve(e.data["sent"] for e in calls)
    assert [m["role"] for m in resolved[1]["messages"]] == ["system", "user", "assistant", "tool"][
        : len(resolved[1]["messages"])
    ]


def test_a_call_stored_before_the_trace_has_no_such_section(operator: User) -> None:
    run = make_run(operator)
    (stored,) = emit(run, model_called(text="Looking it up."))
    client = _client(operator)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Looking it up." in page and "Messages and tool specs sent" not in page
    assert client.get(f"/runs/{run.pk}/sent/{stored.seq}/").status_code == 404
    assert client.get(f"/runs/{run.pk}/sent/999/").status_code == 404


def test_what_a_call_was_sent_is_escaped_and_only_for_who_may_see_the_run(
    operator: User,
) -> None:
    run = make_run(operator)
    sent: dict[str, Any] = {
        "from": 0,
        "new": [
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "<script>alert(1)</script>"},
        ],
        "window": [[0, 1]],
        "tools": [{"name": "get_order", "description": "<b>x</b>", "parameters": {}}],
    }
    event = model_called(text="ok")
    event["data"]["sent"] = sent
    (stored,) = emit(run, event)
    body = _client(operator).get(f"/runs/{run.pk}/sent/{stored.seq}/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert" not in body
    assert "&lt;b&gt;x&lt;/b&gt;" in body
    stranger = User.objects.create_user("stranger", password="pw-123456789")
    assert _client(stranger).get(f"/runs/{run.pk}/sent/{stored.seq}/").status_code in (403, 404)


def test_an_exported_run_with_its_trace_imports_again(operator: User) -> None:
    import io
    import json

    run = actions.do_create_run(user=operator, task="Where is order A1001?")
    engine.execute_run(run.pk)
    client = _client(operator)
    exported = client.get(f"/runs/{run.pk}/export.json").content
    called = [e for e in json.loads(exported)["events"] if e["type"] == "model_called"]
    assert called and all("sent" in e["data"] for e in called)
    upload = io.BytesIO(exported)
    upload.name = "run.json"
    response = client.post("/runs/import/", {"file": upload})
    assert response.status_code == 200 and "Imported file" in response.content.decode()
