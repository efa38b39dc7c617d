"""Suites and experiments (DESIGN §14): cases from tasks and past runs, scored from each
dry run's calls and answer; bad input is a 422 naming the key, nothing stored."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.runs import actions, engine, profiles
from agentweb.runs.models import Experiment, Run, Suite
from agentweb.runtime.testing import call
from tests.runs import sample_tools


def bearer(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def post(client: Client, url: str, data: Any) -> Any:
    return client.post(url, data=json.dumps(data), content_type="application/json")


@pytest.fixture
def past_run(people, scripted, enqueued) -> Run:
    """A normal run that refunded 30 on A1 (approved by a person)."""
    profiles.save_profile({"name": "helper", "system_prompt": "v1", "allowed_tools": []})
    run = actions.do_create_run(user=people["operator"], task="Refund A1", agent_name="helper")
    scripted.enqueue(call("lookup", order_id="A1"), call("pay_out", order_id="A1", amount=30), "ok")
    engine.execute_run(run.pk)
    approval = run.approvals.get()
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    assert engine.execute_run(run.pk) == "succeeded"
    return run


def test_an_experiment_scores_every_case(people, scripted, enqueued, past_run) -> None:
    client = bearer(people["operator"])
    suite = {
        "name": "refunds <week 48>",
        "cases": [
            {
                "name": "from the past run",
                "run": past_run.pk,
                "expect": {"calls": [{"tool": "pay_out", "arguments": {"amount": 30}}]},
            },
            {
                "name": "a new task",
                "task": "Refund B2 in full",
                "expect": {
                    "calls": [{"tool": "pay_out", "arguments": {"order_id": "B2"}}],
                    "no_calls": ["note"],
                    "answer_contains": ["refunded"],
                },
            },
        ],
    }
    made = post(client, "/api/suites", suite)
    assert made.status_code == 201, made.json()
    started = post(client, f"/api/suites/{suite['name']}/experiments", {"agent": "helper"})
    assert started.status_code == 201, started.json()
    exp = started.json()
    assert exp["status"] == "queued" and exp["total"] == 2 and exp["version"] == 1
    runs = [c["run"] for c in exp["cases"]]
    assert set(runs) <= set(enqueued)
    assert all(Run.objects.get(pk=r).mode == "dry" for r in runs)
    # case 1 (the fork of the past run): the same refund -> its recorded result
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "Refunded again.")
    assert engine.execute_run(runs[0]) == "succeeded"
    # case 2: pays the wrong order and adds a note: three failures
    scripted.enqueue(
        [call("pay_out", order_id="C3", amount=5), call("note", customer_id="C1", text="x")],
        "Done.",
    )
    assert engine.execute_run(runs[1]) == "succeeded"
    assert sample_tools.SIDE_EFFECTS["A1"] == 1 and sample_tools.SIDE_EFFECTS["C3"] == 0
    result = client.get(f"/api/experiments/{exp['id']}").json()
    assert result["status"] == "done" and result["passed"] == 1 and result["total"] == 2
    first, second = result["cases"]
    assert first["passed"] is True and first["failures"] == []
    assert second["passed"] is False
    assert second["failures"] == [
        "expected a call to pay_out with {'order_id': 'B2'}; calls made: pay_out, note",
        "called note, which this case must not",
        "the answer does not contain 'refunded'",
    ]
    assert {"tokens", "cost_usd", "duration_ms"} <= set(second)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"name": "s", "cases": [{"name": "a", "task": "t", "expect": {"colour": 1}}]},
         "cases[0].expect: unknown key 'colour'; known: calls, no_calls, answer_contains"),
        ({"name": "s", "cases": [{"name": "a", "task": "t", "expect": {"calls": [{"tol": "x"}]}}]},
         "unknown key 'tol'"),
        ({"name": "s", "cases": [{"name": "a", "task": "t"}], "owner": "me"},
         "unknown keys: owner"),
        ({"name": "s", "cases": [{"name": "a", "task": "t", "run": 1}]},
         "cases[0]: give exactly one of task, ticket or run"),
        ({"name": "s", "cases": [{"name": "a", "run": 424242}]}, "cases[0].run: no run 424242"),
        ({"name": "s", "cases": [{"name": "a", "task": "t", "expect": {"validator": "no.where"}}]},
         "cases[0].expect.validator"),
        ({"name": "s", "cases": []}, "cases"),
    ],
)  # fmt: skip
def test_bad_suites_are_refused_naming_the_key(people, body, words) -> None:
    response = post(bearer(people["operator"]), "/api/suites", body)
    assert response.status_code == 422, response.json()
    assert words in response.json()["error"]["message"]
    assert not Suite.objects.exists()


def test_bad_experiments_and_who_may(people, enqueued) -> None:
    client = bearer(people["operator"])
    post(client, "/api/suites", {"name": "s", "cases": [{"name": "a", "task": "t"}]})
    ghost = post(client, "/api/suites/s/experiments", {"agent": "ghost"})
    assert ghost.status_code == 422 and "unknown agent 'ghost'" in ghost.json()["error"]["message"]
    version = post(client, "/api/suites/s/experiments", {"agent": "triage", "version": 5})
    assert version.status_code == 404 and "no version 5" in version.json()["error"]["message"]
    extra = post(client, "/api/suites/s/experiments", {"agent": "triage", "mood": "x"})
    assert extra.status_code == 422 and "unknown keys: mood" in extra.json()["error"]["message"]
    assert post(client, "/api/suites/nope/experiments", {"agent": "triage"}).status_code == 404
    assert not Experiment.objects.exists() and not Run.objects.exists()
    approver = bearer(people["approver"])
    assert approver.get("/api/suites").status_code == 403
    assert post(approver, "/api/suites/s/experiments", {"agent": "triage"}).status_code == 403
    assert client.get("/api/experiments/999").status_code == 404


def test_the_suites_page_and_two_experiments_side_by_side(people, scripted, enqueued) -> None:
    client = bearer(people["operator"])
    profiles.save_profile({"name": "helper", "system_prompt": "v1", "allowed_tools": []})
    case = {
        "name": "<b>full refund</b>",
        "task": "Refund B2",
        "expect": {"calls": [{"tool": "pay_out", "arguments": {"order_id": "B2"}}]},
    }
    assert post(client, "/api/suites", {"name": "week", "cases": [case]}).status_code == 201
    ids = []
    for replies in (
        [call("pay_out", order_id="B2", amount=80), "Refunded."],
        ["No refund."],
    ):
        exp = post(client, "/api/suites/week/experiments", {"agent": "helper"}).json()
        scripted.enqueue(*replies)
        engine.execute_run(exp["cases"][0]["run"])
        ids.append(exp["id"])
    page = Client()
    page.force_login(people["operator"])
    listing = page.get("/suites/").content.decode()
    assert f'id="experiment-{ids[0]}"' in listing and f'id="experiment-{ids[1]}"' in listing
    assert "&lt;b&gt;full refund&lt;/b&gt;" in listing and "<b>full refund</b>" not in listing
    side = page.get(f"/experiments/compare/?a={ids[0]}&b={ids[1]}").content.decode()
    assert "passed → failed" in side and "calls: pay_out" in side and "calls: none" in side
    assert "expected a call to pay_out" in side
    assert page.get(f"/experiments/compare/?a={ids[0]}&b=999").status_code == 404
    approver = Client()
    approver.force_login(people["approver"])
    assert approver.get("/suites/").status_code == 403


def test_add_to_suite_from_a_run_page(people, scripted, enqueued, past_run) -> None:
    page = Client()
    page.force_login(people["operator"])
    detail = page.get(f"/runs/{past_run.pk}/").content.decode()
    assert 'data-testid="add-to-suite"' in detail
    form = page.get(f"/suites/add/?run={past_run.pk}").content.decode()
    assert "&quot;pay_out&quot;" in form and "&quot;lookup&quot;" in form  # its calls, prefilled
    bad = page.post(
        "/suites/add/", {"run": past_run.pk, "suite": "s", "name": "x", "expect": '{"colour": 1}'}
    )
    assert bad.status_code == 422 and "unknown key" in bad.content.decode()
    assert not Suite.objects.exists()
    expect = json.dumps({"calls": [{"tool": "pay_out", "arguments": {"amount": 30}}]})
    for name in ("first", "second"):
        done = page.post(
            "/suites/add/",
            {"run": past_run.pk, "suite": "from runs", "name": name, "expect": expect},
        )
        assert done.status_code == 302
    suite = Suite.objects.get(name="from runs")
    assert [c["name"] for c in suite.cases] == ["first", "second"]
    assert suite.cases[0]["run"] == past_run.pk
    assert page.get("/suites/add/?run=424242").status_code == 404
