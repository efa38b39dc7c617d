"""Approvals that cannot be dodged: thresholds on totals (sum_per), visible policy
decisions, profile policy changes audited, "never" on a high-risk tool refused."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from agentweb.runs import actions, engine
from agentweb.runs.models import AgentProfile, Approval, AuditEntry, Run, RunEvent
from agentweb.runtime.testing import call
from tests.runs import sample_tools

RULE = {"argument": "amount", "at_least": 20, "sum_per": "order_id"}


@pytest.fixture
def summed(people: dict[str, Any]) -> AgentProfile:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.approval_policies = {"pay_out": RULE}
    profile.save()
    return profile


def start(people: dict[str, Any], task: str = "Refund order A1") -> Run:
    return actions.do_create_run(user=people["operator"], task=task)


def pending(run: Run) -> list[Approval]:
    return list(Approval.objects.filter(run=run, status="pending").order_by("pk"))


def started(run: Run) -> list[dict[str, Any]]:
    return [e.data for e in RunEvent.objects.filter(run=run, type="tool_call_started")]


def approve_all(people: dict[str, Any], run: Run) -> None:
    for approval in pending(run):
        actions.do_decide_approval(
            approval_id=approval.pk, user=people["approver"], decision="approve"
        )


def test_ten_small_refunds_in_one_reply_need_a_person_from_the_second(
    people, scripted, enqueued, summed
) -> None:
    # (ten identical calls would be one call and nine duplicates: the amounts differ)
    amounts = [round(19.99 - i / 100, 2) for i in range(10)]
    scripted.enqueue([call("pay_out", order_id="A1", amount=a) for a in amounts], "Asked.")
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert sample_tools.SIDE_EFFECTS["A1"] == 1  # the first one only
    assert [a.arguments["amount"] for a in pending(run)] == amounts[1:]
    first = started(run)[0]
    assert first["approval"] == {
        "by": "policy",
        "reason": "amount below 20 on order_id A1 (total 19.99)",
    }
    requested = RunEvent.objects.filter(run=run, type="approval_requested").order_by("seq")
    assert requested.count() == 9
    assert requested[0].data["why"] == "amount on order_id A1 reaches 20 (total 39.97)"


def test_small_refunds_across_turns_add_up(people, scripted, enqueued, summed) -> None:
    scripted.enqueue(
        call("pay_out", order_id="A1", amount=19.99),
        call("pay_out", order_id="A1", amount=0.5),  # 20.49 in all: a person now
        "Done.",
    )
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert sample_tools.SIDE_EFFECTS["A1"] == 1
    [second] = pending(run)
    assert second.arguments["amount"] == 0.5
    approve_all(people, run)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert [s.get("approval") for s in started(run)] == [
        {"by": "policy", "reason": "amount below 20 on order_id A1 (total 19.99)"},
        {"by": "person"},
    ]
    assert [a["approved_by"] for a in run.actions()] == ["policy", "person"]


def test_small_refunds_across_runs_add_up_also_pending_ones(
    people, scripted, enqueued, summed
) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=19.99), "Done.")
    first = start(people)
    assert engine.execute_run(first.pk) == Run.Status.SUCCEEDED
    # another run, the same order written differently: still one order's total
    scripted.enqueue(call("pay_out", order_id=" a1 ", amount=1))
    second = start(people)
    assert engine.execute_run(second.pk) == Run.Status.WAITING_APPROVAL
    assert sample_tools.SIDE_EFFECTS["A1"] == 1 and sample_tools.SIDE_EFFECTS[" a1 "] == 0
    # a pending call counts too: a third run's small refund on A1 waits for a person
    scripted.enqueue(call("pay_out", order_id="A1", amount=0.01))
    third = start(people)
    assert engine.execute_run(third.pk) == Run.Status.WAITING_APPROVAL
    reason = RunEvent.objects.get(run=third, type="approval_requested").data["reason"]
    assert reason == "policy"


def test_other_orders_and_failed_calls_do_not_count(people, scripted, enqueued, summed) -> None:
    scripted.enqueue(
        call("pay_out", order_id="A1", amount=0),  # the tool refuses it: nothing was paid
        call("pay_out", order_id="A1", amount=19.99),
        call("pay_out", order_id="A2", amount=19.99),
        "Done.",
    )
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert sample_tools.SIDE_EFFECTS["A1"] == 1 and sample_tools.SIDE_EFFECTS["A2"] == 1
    assert not Approval.objects.filter(run=run).exists()


# Spellings of one group to group_key, and ones it keeps apart; the indexed SQL narrowing
# (models.GroupKeys) must find every row group_key joins, whatever the spelling.
SPELLINGS: list[Any] = [
    "A1",
    " a1 ",
    "\tA1\x1c\n",
    "A10",
    "STRASSE-1",
    "Straße-1",  # casefolds to strasse-1: SQL leaves it to Python ("*")
    "\u212a9",  # KELVIN SIGN: casefolds to k9
    "k9",
    7,
    "7",
    "x" * 250,
    "X" * 250,
]


def test_totals_find_every_spelling_of_a_group(people, enqueued, sample_registry) -> None:
    from agentweb.runs.models import ToolExecution
    from agentweb.runs.policies import prior_total
    from agentweb.runtime.approvals import group_key

    run = start(people)
    for i, spelling in enumerate(SPELLINGS):
        ToolExecution.objects.create(
            run=run,
            call_id=f"c{i}",
            tool="pay_out",
            arguments={"order_id": spelling, "amount": 1},
            status="succeeded",
        )
    for wanted in SPELLINGS:
        same = sum(group_key(s) == group_key(wanted) for s in SPELLINGS)
        assert prior_total("pay_out", "amount", "order_id", wanted) == same, wanted
    assert prior_total("pay_out", "amount", "order_id", "a1") == 2 + 1  # A1, " a1 ", tabbed


def test_a_pending_call_counts_on_the_order_a_person_edited_it_to(
    people, scripted, enqueued, summed
) -> None:
    from agentweb.runs.policies import prior_total

    scripted.enqueue(call("pay_out", order_id="A2", amount=30), "Asked.")
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    [asked] = pending(run)
    Approval.objects.filter(pk=asked.pk).update(
        status="approved", edited_arguments={"order_id": "A1", "amount": 30}
    )
    assert prior_total("pay_out", "amount", "order_id", "A1") == 30
    assert prior_total("pay_out", "amount", "order_id", "A2") == 0


def test_a_medium_risk_call_says_no_person_was_needed(people, scripted, enqueued) -> None:
    scripted.enqueue(call("note", customer_id="C1", text="x"), call("lookup", order_id="A1"), "ok")
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    note, lookup = started(run)
    assert note["approval"] == {"by": "policy", "reason": "medium risk: runs without approval"}
    assert "approval" not in lookup  # a read: nothing to approve


def test_the_bundled_refund_rule_adds_up_per_order(settings) -> None:
    from agentweb.runs.profiles import TICKET_APPROVAL_POLICIES
    from agentweb.runtime.approvals import Threshold
    from agentweb.runtime.tools import load_tools

    refund = load_tools(["tools.ticket"]).get("issue_refund")
    assert refund is not None
    assert refund.approval == Threshold("amount", 20.0, "order_id")
    assert TICKET_APPROVAL_POLICIES["issue_refund"] == RULE


def test_the_seeded_ticket_profile_uses_the_total_rule(people) -> None:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    assert profile.approval_policies == {"issue_refund": RULE}


# -- weakening a policy ----------------------------------------------------------------------


def test_never_for_a_high_risk_tool_is_refused_unless_the_installation_allows_it(
    people, sample_registry, settings
) -> None:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.approval_policies = {"pay_out": "never"}
    with pytest.raises(ValidationError) as error:
        profile.full_clean()
    assert "AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK" in str(error.value.message_dict)
    profile.approval_policies = {"lookup": "never", "note": "never"}  # low/medium: fine
    profile.full_clean()
    profile.approval_policies = {"pay_out": "never"}
    settings.AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK = True
    profile.full_clean()


def test_a_risk_override_to_high_makes_never_refused(people, sample_registry) -> None:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.risk_overrides = {"note": "high"}
    profile.approval_policies = {"note": "never"}
    with pytest.raises(ValidationError):
        profile.full_clean()


def test_bad_rules_are_refused_with_the_field(people, sample_registry) -> None:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    for bad in (
        {"pay_out": {"argument": "amount"}},
        {"pay_out": {"argument": "amount", "at_least": "20"}},
        {"pay_out": {"argument": "amount", "at_least": 20, "sum_per": "order__id"}},
        {"pay_out": {"argument": "amount", "at_least": 20, "extra": 1}},
        {"pay_out": "sometimes"},
        ["pay_out"],
    ):
        profile.approval_policies = bad
        with pytest.raises(ValidationError) as error:
            profile.full_clean()
        assert "approval_policies" in error.value.message_dict


def test_every_policy_change_is_audited_with_before_and_after(people, sample_registry) -> None:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    before = dict(profile.approval_policies)
    profile.approval_policies = {"pay_out": {"argument": "amount", "at_least": 50}}
    actions.do_save_profile(profile, actor=people["admin"])
    profile.description = "only the text changed"
    actions.do_save_profile(profile, actor=people["admin"])  # no policy change: no entry
    [entry] = AuditEntry.objects.filter(action="approval_policies_changed")
    assert entry.actor == people["admin"]
    assert entry.data == {
        "agent": "ticket-assistant",
        "before": before,
        "after": {"pay_out": {"argument": "amount", "at_least": 50}},
    }


def test_the_agent_page_refuses_never_and_audits_a_change(people, sample_registry) -> None:
    from django.test import Client

    client = Client()
    client.force_login(people["admin"])
    profile = AgentProfile.objects.get(name="ticket-assistant")
    form = {
        "description": profile.description,
        "model": "",
        "system_prompt": profile.system_prompt,
        "allowed_tools": "[]",
        "max_iterations": 20,
        "risk_overrides": "{}",
        "approval_policies": '{"pay_out": "never"}',
        "context_budget_tokens": 16000,
    }
    page = client.post(f"/agents/{profile.pk}/", form)
    assert page.status_code == 422  # the form again, with the error
    assert "AGENTWEB_ALLOW_UNAPPROVED_HIGH_RISK" in page.content.decode()
    assert not AuditEntry.objects.filter(action="approval_policies_changed").exists()
    form["approval_policies"] = '{"pay_out": "always"}'
    assert client.post(f"/agents/{profile.pk}/", form).status_code == 302
    entry = AuditEntry.objects.get(action="approval_policies_changed")
    assert entry.data["after"] == {"pay_out": "always"} and entry.actor == people["admin"]


def test_the_api_refuses_never_with_422_and_audits_a_change(people, sample_registry) -> None:
    import json as _json

    from django.test import Client

    from agentweb.accounts.models import ApiToken

    client = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(people['admin'])}")

    def patch(policies: Any) -> Any:
        return client.patch(
            "/api/agents/ticket-assistant",
            data=_json.dumps({"approval_policies": policies}),
            content_type="application/json",
        )

    refused = patch({"pay_out": "never"})
    assert refused.status_code == 422, refused.content
    assert "approval_policies" in _json.dumps(refused.json())
    assert not AuditEntry.objects.filter(action="approval_policies_changed").exists()
    assert patch({"pay_out": RULE}).status_code == 200
    entry = AuditEntry.objects.get(action="approval_policies_changed")
    assert entry.data["after"] == {"pay_out": RULE} and entry.actor == people["admin"]
