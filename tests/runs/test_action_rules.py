"""The rules live in the actions: a page, the API and a direct call are refused alike, and
every profile write leaves the same audit lines whichever door it came through."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.runs import actions
from agentweb.runs.models import AgentProfile, AuditEntry, Run


@pytest.fixture
def reader(people: dict[str, Any]) -> User:
    """Someone who may look at runs but not start them (no role grants that alone)."""
    user = User.objects.create_user("reader", password="pw-123456789")
    user.user_permissions.add(Permission.objects.get(codename="view_run"))
    return User.objects.get(pk=user.pk)


def test_a_direct_call_is_refused_without_the_permission(reader: User) -> None:
    with pytest.raises(actions.NotAllowed, match="may not start runs"):
        actions.do_create_run(user=reader, task="Where is my order A1?")
    assert not Run.objects.exists()


def test_the_api_and_the_page_refuse_through_the_action(reader: User, enqueued) -> None:
    api = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(reader)}")
    answer = api.post("/api/runs", data=json.dumps({"task": "t"}), content_type="application/json")
    assert answer.status_code == 403
    assert answer.json()["error"]["message"] == "you may not start runs"

    page = Client()
    page.force_login(reader)
    shown = page.post("/runs/new/", {"task": "t"}, follow=True)
    assert "you may not start runs" in shown.content.decode()
    assert not Run.objects.exists() and enqueued == []


def test_an_operator_still_starts_runs(people: dict[str, Any], enqueued) -> None:
    run = actions.do_create_run(user=people["operator"], task="Where is my order A1?")
    assert enqueued == [] or enqueued == [run.pk]  # sent on commit (atomic test blocks wait)
    assert Run.objects.get().pk == run.pk


def _entries(action: str) -> list[dict[str, Any]]:
    return list(AuditEntry.objects.filter(action=action).order_by("pk").values("actor", "data"))


def test_profile_writes_are_audited_the_same_from_the_api_and_the_page(
    people: dict[str, Any],
) -> None:
    admin = people["admin"]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(admin)}")
    made = api.post(
        "/api/agents",
        data=json.dumps({"name": "by-api", "system_prompt": "p"}),
        content_type="application/json",
    )
    assert made.status_code == 201
    page = Client()
    page.force_login(admin)
    cloned = page.post(
        "/agents/new/",
        {
            "name": "by-page",
            "clone": "by-api",
            "description": "",
            "model": "",
            "system_prompt": "p2",
            "allowed_tools": '["get_order"]',
            "tool_selection": "all",
            "validator": "",
            "max_iterations": 5,
            "risk_overrides": "{}",
            "approval_policies": "{}",
            "delegates": "[]",
            "context_budget_tokens": 8000,
        },
    )
    assert cloned.status_code == 302, cloned.content.decode()[:2000]

    created = _entries("agent_profile_created")
    assert [(e["actor"], e["data"]["agent"]) for e in created] == [
        (admin.pk, "by-api"),
        (admin.pk, "by-page"),
    ]
    assert "system_prompt" in created[0]["data"]["fields"]
    assert created[1]["data"]["cloned_from"] == "by-api"

    changed = api.patch(
        "/api/agents/by-api",
        data=json.dumps({"approval_policies": {"issue_refund": "always"}}),
        content_type="application/json",
    )
    assert changed.status_code == 200, changed.content
    [edit] = _entries("agent_profile_changed")
    assert edit["data"]["agent"] == "by-api" and "approval_policies" in edit["data"]["fields"]
    assert "system_prompt" not in edit["data"]["fields"]  # PATCH names only what it sent
    [policy] = _entries("approval_policies_changed")
    assert policy["data"]["before"] == {} and policy["data"]["after"] != {}


def test_deleting_is_an_action_with_its_audit_line_and_its_refusal(
    people: dict[str, Any],
) -> None:
    admin = people["admin"]
    gone = AgentProfile.objects.create(name="gone", system_prompt="p")
    actions.do_delete_profile(gone, actor=admin)
    assert _entries("agent_profile_deleted") == [{"actor": admin.pk, "data": {"agent": "gone"}}]

    kept = AgentProfile.objects.get(name="triage")
    Run.objects.create(task="t", agent=kept, created_by=admin)
    with pytest.raises(actions.ProfileInUse, match="1 run"):
        actions.do_delete_profile(kept, actor=admin)
    page = Client()
    page.force_login(admin)
    refused = page.post(f"/agents/{kept.pk}/delete/", follow=True)
    assert "Not deleted: triage has 1 run" in refused.content.decode()
    assert AgentProfile.objects.filter(name="triage").exists()
    assert len(_entries("agent_profile_deleted")) == 1


# --- profile writes are refused inside the actions, as runs are --------------------------


def _profile_rows() -> list[tuple[str, str]]:
    return list(AgentProfile.objects.order_by("name").values_list("name", "description"))


def test_a_direct_profile_write_is_refused_without_the_permission(people: dict[str, Any]) -> None:
    from django.contrib.auth.models import AnonymousUser

    from agentweb.runs import profiles

    before, audited = _profile_rows(), AuditEntry.objects.count()
    triage = AgentProfile.objects.get(name="triage")
    for who in (people["operator"], people["approver"], AnonymousUser()):
        triage.description = "changed by someone who may not"
        with pytest.raises(actions.NotAllowed, match="only admins may change agent profiles"):
            actions.do_save_profile(triage, actor=who, fields=["description"])
        with pytest.raises(actions.NotAllowed):
            actions.do_save_profile(AgentProfile(name="new-one", system_prompt="p"), actor=who)
        with pytest.raises(actions.NotAllowed):
            actions.do_delete_profile(AgentProfile.objects.get(name="triage"), actor=who)
        # refused before the data is read: no field errors for one who may not write
        with pytest.raises(actions.NotAllowed):
            profiles.save_profile({"name": "bad name!", "max_iterations": 0}, actor=who)
    assert _profile_rows() == before
    assert AuditEntry.objects.count() == audited


def test_creating_asks_for_add_and_changing_for_change(people: dict[str, Any]) -> None:
    editor = User.objects.create_user("editor", password="pw-123456789")
    editor.user_permissions.add(Permission.objects.get(codename="change_agentprofile"))
    editor = User.objects.get(pk=editor.pk)
    triage = AgentProfile.objects.get(name="triage")
    triage.description = "edited"
    actions.do_save_profile(triage, actor=editor, fields=["description"])
    assert AgentProfile.objects.get(name="triage").description == "edited"
    with pytest.raises(actions.NotAllowed):
        actions.do_save_profile(AgentProfile(name="new-one", system_prompt="p"), actor=editor)
    assert not AgentProfile.objects.filter(name="new-one").exists()


def test_admins_and_the_installation_itself_may_write_profiles(people: dict[str, Any]) -> None:
    from agentweb.runs import profiles

    made = profiles.save_profile({"name": "by-admin", "system_prompt": "p"}, actor=people["admin"])
    imported = profiles.save_profile({"name": "by-import", "system_prompt": "p"})  # agents import
    actions.do_delete_profile(made, actor=people["admin"])
    actions.do_delete_profile(imported, actor=None)
    actors = [e["actor"] for e in _entries("agent_profile_created")]
    assert actors == [people["admin"].pk, None]
    assert [e["actor"] for e in _entries("agent_profile_deleted")] == [people["admin"].pk, None]
