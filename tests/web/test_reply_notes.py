"""The run page says when a model reply was cut off or truncated (issue 14)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agentweb.accounts.roles import ensure_roles
from tests.web import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> User:
    user = User.objects.create_user("operator", password="pw-123456789")
    user.groups.add(ensure_roles()["operator"])
    return user


def page(user: User, run_id: int) -> str:
    client = Client()
    client.force_login(user)
    return client.get(f"/runs/{run_id}/").content.decode()


def test_the_run_page_says_a_reply_was_cut_off_inside_a_call(operator: User) -> None:
    run = f.make_run(operator)
    cut = f.model_called(text="Looking.", tool="<b>cancel</b>", call_id="c2")
    cut["data"].update(cut_off=True, finish_reason="length")
    cut["data"]["tool_calls"][0]["cut_off"] = True
    f.emit(run, cut, f.model_called(text="Plain reply."))
    body = page(operator, run.pk)
    assert body.count("Reply cut off at the model's output token limit (length)") == 1
    assert "which was not run" in body and "cut off · not run" in body
    assert "<b>cancel</b>" not in body and "&lt;b&gt;cancel&lt;/b&gt;" in body


def test_the_run_page_says_an_answer_was_truncated(operator: User) -> None:
    run = f.make_run(operator)
    called = f.model_called(text="x" * 50, tool="")
    called["data"]["truncated"] = True
    finished = {"type": "run_finished", "data": {"final_answer": "x" * 50, "truncated": True}}
    f.emit(run, called, finished, status="succeeded")
    body = page(operator, run.pk)
    assert "Reply truncated" in body and '<span class="badge">truncated</span>' in body


def test_a_whole_reply_has_no_such_notes(operator: User) -> None:
    run = f.make_run(operator)
    f.emit(run, f.model_called(text="Fine."))
    body = page(operator, run.pk)
    assert "Reply cut off" not in body and "Reply truncated" not in body
