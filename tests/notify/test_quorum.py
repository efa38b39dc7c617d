"""Quorum: a policy's "approvers": N (optionally above an amount) — N distinct people, none
the run's starter; the same person again is 409; one rejection rejects; "1 of 2" shown."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client

from agentweb.runs import actions, engine
from agentweb.runs.errors import ActionError, Conflict, NotAllowed
from agentweb.runs.models import AgentProfile, Approval, ApprovalVote, Run, RunEvent
from agentweb.runs.people import runtime_policies, split_policy
from agentweb.runtime.testing import call
from tests.runs import sample_tools

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def crew(people: dict[str, Any]) -> dict[str, Any]:
    approvers = Group.objects.get(name="approver")
    for name in ("ann", "ben", "cat"):
        user = User.objects.create_user(name, password="pw-123456789")
        user.groups.add(approvers)
        people[name] = User.objects.get(pk=user.pk)
    return people


def policy(rule: Any) -> None:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.approval_policies = {"pay_out": rule}
    profile.full_clean()
    profile.save()


def paused(people: dict[str, Any], scripted: Any, amount: float = 60) -> Approval:
    scripted.enqueue(call("pay_out", order_id="A1", amount=amount), f"Paid back {amount}.")
    run = actions.do_create_run(user=people["operator"], task="Pay back A1")
    assert engine.execute_run(run.pk) == "waiting_approval"
    return Approval.objects.get(run=run)


def approve(people: dict[str, Any], who: str, approval: Approval, **kw: Any) -> Approval:
    return actions.do_decide_approval(
        approval_id=approval.pk, user=people[who], decision="approve", **kw
    )


def test_policies_read_the_people_part() -> None:
    assert split_policy({"approvers": 2})[0] == "always"
    rule, people = split_policy({"argument": "amount", "at_least": 50, "approvers": 2})
    assert rule == {"argument": "amount", "at_least": 50} and people.approvers == 2
    assert runtime_policies({"t": {"approvers": 0}}) == {"t": {"approvers": 0}}  # gate: unreadable
    for bad in ({"approvers": 0}, {"approvers": True}, {"approvers": 1.5}, {"approvers": 11}):
        with pytest.raises(ValueError, match="approvers"):
            split_policy(bad)


def test_a_profile_refuses_a_bad_quorum(crew: Any, sample_registry: Any, settings: Any) -> None:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.approval_policies = {"pay_out": {"approvers": "two"}}
    with pytest.raises(ValidationError) as info:
        profile.full_clean()
    assert "approvers must be a whole number" in str(info.value.message_dict["approval_policies"])
    settings.AGENTWEB_ESCALATION_GROUP = ""
    profile.approval_policies = {"pay_out": {"approvers": 2, "escalate_after_minutes": 5}}
    with pytest.raises(ValidationError, match="AGENTWEB_ESCALATION_GROUP"):
        profile.full_clean()
    settings.AGENTWEB_ESCALATION_GROUP = "leads"
    profile.full_clean()


def test_two_people_approve_then_it_runs_once(
    crew: Any, sample_registry: Any, scripted: Any, enqueued: list[int]
) -> None:
    policy({"argument": "amount", "at_least": 50, "approvers": 2})
    approval = paused(crew, scripted)
    assert (approval.approvals_needed, approval.approvals_given()) == (2, 0)
    first = approve(crew, "ann", approval)
    assert first.status == "pending" and first.approvals_given() == 1
    assert Run.objects.get(pk=approval.run_id).status == "waiting_approval"
    assert enqueued == [approval.run_id]  # only the start so far
    with pytest.raises(Conflict, match="you already approved this call \\(1 of 2\\)") as again:
        approve(crew, "ann", approval)
    assert again.value.status == 409 and again.value.code == "already_approved"
    with pytest.raises(NotAllowed):
        approve(crew, "operator", approval)  # the starter (and no approver)
    done = approve(crew, "ben", approval)
    assert done.status == "approved" and done.decided_by == crew["ben"]
    assert [v.user.username for v in ApprovalVote.objects.filter(approval=approval)] == [
        "ann",
        "ben",
    ]
    assert engine.execute_run(approval.run_id) == "succeeded"
    assert sample_tools.SIDE_EFFECTS["A1"] == 1
    kinds = list(
        RunEvent.objects.filter(run_id=approval.run_id)
        .order_by("seq")
        .values_list("type", flat=True)
    )
    assert kinds.count("approval_given") == 1 and kinds.count("approval_decided") == 1
    with pytest.raises(Conflict):
        approve(crew, "cat", approval)  # decided: a third changes nothing


def test_below_the_amount_no_person_is_asked(
    crew: Any, sample_registry: Any, scripted: Any, enqueued: list[int]
) -> None:
    policy({"argument": "amount", "at_least": 50, "approvers": 2})
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "Paid back 30.")
    run = actions.do_create_run(user=crew["operator"], task="Pay back A1")
    assert engine.execute_run(run.pk) == "succeeded"
    assert not Approval.objects.filter(run=run).exists()


def test_one_rejection_rejects(
    crew: Any, sample_registry: Any, scripted: Any, enqueued: list[int]
) -> None:
    policy({"approvers": 2})
    approval = paused(crew, scripted, amount=10)  # "approvers" alone: every call
    approve(crew, "ann", approval)
    rejected = actions.do_decide_approval(
        approval_id=approval.pk, user=crew["ben"], decision="reject", comment="Not this order"
    )
    assert rejected.status == "rejected"
    assert engine.execute_run(approval.run_id) == "succeeded"
    assert sample_tools.SIDE_EFFECTS["A1"] == 0


def test_the_first_approvers_edit_is_what_the_others_approve(
    crew: Any, sample_registry: Any, scripted: Any, enqueued: list[int]
) -> None:
    policy({"approvers": 2})
    approval = paused(crew, scripted, amount=60)
    approve(crew, "ann", approval, arguments={"order_id": "A1", "amount": 40})
    with pytest.raises(Conflict, match="already approved these arguments"):
        approve(crew, "ben", approval, arguments={"order_id": "A1", "amount": 45})
    done = approve(crew, "ben", approval)
    assert done.status == "approved" and done.edited_arguments == {"order_id": "A1", "amount": 40}
    engine.execute_run(approval.run_id)
    assert sample_tools.KEYS and sample_tools.SIDE_EFFECTS["A1"] == 1


def test_the_api_and_the_pages_say_1_of_2(
    crew: Any, sample_registry: Any, scripted: Any, enqueued: list[int]
) -> None:
    policy({"approvers": 2})
    approval = paused(crew, scripted)
    approve(crew, "ann", approval)
    ben = Client()
    ben.force_login(crew["ben"])
    [shown] = ben.get("/api/approvals?status=pending").json()["approvals"]
    assert (shown["approvals_needed"], shown["approvals_given"]) == (2, 1)
    inbox = ben.get("/approvals/").content.decode()
    assert "Approvals: <strong>1 of 2</strong> (ann)" in inbox
    page = ben.get(f"/runs/{approval.run_id}/").content.decode()
    assert "1 of 2" in page
    ann = Client()
    ann.force_login(crew["ann"])
    assert "You approved this call" in ann.get("/approvals/").content.decode()
    again = ann.post(f"/api/approvals/{approval.pk}/decide", {"decision": "approve"},
                     content_type="application/json")  # fmt: skip
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_approved"


def test_each_decisions_answer_is_the_approval_as_stored(
    crew: Any, sample_registry: Any, scripted: Any, enqueued: list[int]
) -> None:
    """The decide answer shows what the decision knows without reading it again (its run,
    the approvals given so far): the same as a later read of the approval."""
    policy({"approvers": 2})

    def decide(who: str, approval: Approval, decision: str) -> dict[str, Any]:
        client = Client()
        client.force_login(crew[who])
        response = client.post(
            f"/api/approvals/{approval.pk}/decide",
            {"decision": decision, "comment": "not this one"},
            content_type="application/json",
        )
        assert response.status_code == 200, response.content
        [stored] = [
            a for a in client.get("/api/approvals").json()["approvals"] if a["id"] == approval.pk
        ]
        answer = response.json()
        assert answer == stored
        return answer

    first = paused(crew, scripted)
    shown = decide("ann", first, "approve")
    assert (shown["status"], shown["approvals_given"]) == ("pending", 1)
    assert shown["top_run"] == first.run_id
    shown = decide("ben", first, "approve")
    assert (shown["status"], shown["approvals_given"]) == ("approved", 2)
    assert engine.execute_run(first.run_id) == "succeeded"  # its reply is used up
    second = paused(crew, scripted)
    decide("ann", second, "approve")
    shown = decide("ben", second, "reject")
    assert (shown["status"], shown["approvals_given"]) == ("rejected", 1)


def test_many_people_at_once_make_one_decision(
    crew: Any, sample_registry: Any, scripted: Any, enqueued: list[int]
) -> None:
    approvers = Group.objects.get(name="approver")
    users = []
    for i in range(8):  # with the test's own, within the process's pool of 10 connections
        user = User.objects.create_user(f"p{i}")
        user.groups.add(approvers)
        users.append(User.objects.get(pk=user.pk))
    policy({"approvers": 2})
    approval = paused(crew, scripted)
    results: list[str] = []
    start = threading.Barrier(len(users), timeout=30)

    def decide(user: User) -> None:
        try:
            start.wait()
            actions.do_decide_approval(approval_id=approval.pk, user=user, decision="approve")
            results.append("ok")
        except ActionError as exc:
            results.append(exc.code)
        finally:
            connection.close()

    connection.close()
    threads = [threading.Thread(target=decide, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results.count("ok") == 2 and results.count("conflict") == 6, results
    assert Approval.objects.get(pk=approval.pk).status == "approved"
    assert ApprovalVote.objects.filter(approval=approval).count() == 2
    assert enqueued.count(approval.run_id) == 2  # the start, and one resume
