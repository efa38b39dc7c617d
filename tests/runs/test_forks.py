"""Forks (DESIGN §14): a dry run from a past run's conversation at a seq, continued by
another profile version or model; equal calls get the source's recorded results; bad
input is a 4xx naming the problem, with nothing created."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.runs import actions, engine, profiles
from agentweb.runs.models import Run, RunEvent, ToolExecution
from agentweb.runtime.messages import AssistantMessage, ToolMessage, UserMessage
from agentweb.runtime.testing import call
from tests.runs import sample_tools


def bearer(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def post(client: Client, url: str, data: Any) -> Any:
    return client.post(url, data=json.dumps(data), content_type="application/json")


def events(run_id: int) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run_id=run_id).order_by("seq"))


@pytest.fixture
def source(people, scripted, enqueued) -> Run:
    """A normal run of 'helper' v1: a lookup, a paid-out refund of 30 (approved by a
    person), then an answer."""
    profiles.save_profile({"name": "helper", "system_prompt": "Version one.", "allowed_tools": []})
    run = actions.do_create_run(user=people["operator"], task="Refund A1", agent_name="helper")
    scripted.enqueue(
        call("lookup", order_id="A1"), call("pay_out", order_id="A1", amount=30), "Refunded 30."
    )
    assert engine.execute_run(run.pk) == "waiting_approval"
    approval = run.approvals.get()
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    assert engine.execute_run(run.pk) == "succeeded"
    assert sample_tools.SIDE_EFFECTS["A1"] == 1
    return Run.objects.get(pk=run.pk)


def test_a_fork_continues_from_the_conversation_at_its_seq(people, scripted, source) -> None:
    profiles.save_profile(
        {"system_prompt": "Version two: be generous."},
        source.agent,
        partial=True,
    )
    seqs = {e.type: e.seq for e in reversed(events(source.pk))}  # the first of each
    lookup_done = next(
        e.seq
        for e in events(source.pk)
        if e.type == "tool_call_finished" and e.data["tool"] == "lookup"
    )
    client = bearer(people["operator"])
    response = post(client, f"/api/runs/{source.pk}/fork", {"at_seq": lookup_done, "version": 2})
    assert response.status_code == 201, response.json()
    fork = response.json()
    assert fork["mode"] == "dry" and fork["agent_version"] == 2
    assert fork["forked_from"] == {"run": source.pk, "at_seq": lookup_done}
    copied = events(fork["id"])
    assert [(e.seq, e.type, e.data) for e in copied] == [
        (e.seq, e.type, e.data) for e in events(source.pk) if e.seq <= lookup_done
    ]
    # v2 asks for the same refund (recorded result), then a new bigger one (dry), answers.
    scripted.enqueue(
        [call("pay_out", order_id="A1", amount=30), call("pay_out", order_id="A1", amount=45)],
        "Refunded 30 and 45.",
    )
    assert engine.execute_run(fork["id"]) == "succeeded"
    assert sample_tools.SIDE_EFFECTS["A1"] == 1  # nothing paid again
    seen = scripted.requests[-2].messages  # what v2's first call saw
    assert seen[0].content.startswith("Version two")
    assert isinstance(seen[1], UserMessage) and seen[1].content == "Refund A1"
    assert isinstance(seen[2], AssistantMessage) and seen[2].tool_calls[0].name == "lookup"
    assert isinstance(seen[3], ToolMessage) and '"delivered"' in seen[3].content
    assert len(seen) == 4  # nothing of the source after the fork point
    after = [e for e in events(fork["id"]) if e.seq > lookup_done]
    assert after[0].type == "run_started" and after[0].data["agent_version"] == 2
    results = [e.data for e in after if e.type == "tool_call_finished"]
    assert results[0]["recorded"] is True and results[0]["result"] == {
        "paid_out": 30.0,
        "order_id": "A1",
    }
    assert results[1]["dry"] is True and results[1]["result"]["would_call"] == "pay_out"
    assert not ToolExecution.objects.filter(run_id=fork["id"], tool="pay_out").exists()
    assert not Run.objects.get(pk=fork["id"]).approvals.exists()
    # the compare page shows both from the fork point
    page = Client()
    page.force_login(people["operator"])
    body = page.get(f"/runs/compare/?a={source.pk}&b={fork['id']}").content.decode()
    assert f"is a fork of #{source.pk} at event {lookup_done}" in body
    assert 'class="badge dry"' in body
    assert seqs["run_started"] == 1


def test_a_fork_point_inside_a_turn_moves_back_before_its_reply(people, scripted, source):
    pay_reply = next(
        e.seq
        for e in events(source.pk)
        if e.type == "model_called"
        and e.data["tool_calls"]
        and e.data["tool_calls"][0]["name"] == "pay_out"
    )
    fork = post(bearer(people["operator"]), f"/api/runs/{source.pk}/fork", {"at_seq": pay_reply})
    assert fork.status_code == 201
    assert fork.json()["forked_from"]["at_seq"] == pay_reply - 1  # the refund had no result yet
    scripted.enqueue("No refund needed.")
    assert engine.execute_run(fork.json()["id"]) == "succeeded"
    assert [type(m).__name__ for m in scripted.requests[-1].messages] == [
        "SystemMessage", "UserMessage", "AssistantMessage", "ToolMessage"
    ]  # fmt: skip


def test_fork_by_default_continues_after_the_last_event_with_the_newest_version(
    people, scripted, source
) -> None:
    fork = post(bearer(people["operator"]), f"/api/runs/{source.pk}/fork", {})
    assert fork.status_code == 201
    assert fork.json()["forked_from"]["at_seq"] == source.last_seq
    assert fork.json()["agent_version"] == 1 and fork.json()["model"] == source.model


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"at_seq": 999}, 422, "at_seq 999 is outside run"),
        ({"at_seq": 0}, 422, "at_seq 0 is outside run"),
        ({"agent": "ghost"}, 422, "unknown agent 'ghost'"),
        ({"version": 9}, 422, "no version 9"),
        ({"model": "mistral:large"}, 422, "model: "),
        ({"seq": 3}, 422, "unknown keys: seq"),
        ({"at_seq": "3"}, 422, "at_seq must be a whole number"),
    ],
)
def test_bad_fork_input_names_the_problem_and_creates_nothing(
    people, source, body, status, words
) -> None:
    before = Run.objects.count()
    response = post(bearer(people["operator"]), f"/api/runs/{source.pk}/fork", body)
    assert response.status_code == status, response.json()
    assert words in response.json()["error"]["message"]
    assert Run.objects.count() == before


def test_a_run_the_user_may_not_see_cannot_be_forked(people, source) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    # may see runs and start them, but not runs started by others (no view_all_runs)
    nobody = get_user_model().objects.create_user("stranger", password="pw-123456789")
    nobody.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="runs", codename__in=["view_run", "add_run"]
        )
    )
    before = Run.objects.count()
    hidden = post(bearer(nobody), f"/api/runs/{source.pk}/fork", {})
    assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "not_found"
    missing = post(bearer(people["operator"]), "/api/runs/424242/fork", {})
    assert missing.status_code == 404
    assert Run.objects.count() == before
