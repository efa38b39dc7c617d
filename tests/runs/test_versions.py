"""Profile versions (DESIGN §14): every save is an immutable version, a run records and
runs the version it started with, the API reads them, a restore is a new save."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from django.apps import apps
from django.db import DatabaseError, transaction
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.runs import actions, engine, profiles, versions
from agentweb.runs.models import AgentProfile, AuditEntry, ProfileVersion, RunEvent
from agentweb.runtime.testing import call


def bearer(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def send(client: Client, method: str, url: str, data: Any = None) -> Any:
    body = json.dumps(data) if data is not None else ""
    return getattr(client, method)(url, data=body, content_type="application/json")


def test_every_save_is_a_version_the_api_reads(people) -> None:
    admin = bearer(people["admin"])
    made = send(admin, "post", "/api/agents", {"name": "helper", "system_prompt": "One."})
    assert made.status_code == 201
    assert send(admin, "patch", "/api/agents/helper", {"system_prompt": "Two."}).status_code == 200
    assert send(admin, "put", "/api/agents/helper", {"system_prompt": "Three."}).status_code == 200
    reader = bearer(people["operator"])  # anyone signed in reads them
    listed = reader.get("/api/agents/helper/versions").json()["versions"]
    assert [v["version"] for v in listed] == [3, 2, 1]  # newest first
    assert [v["profile"]["system_prompt"] for v in listed] == ["Three.", "Two.", "One."]
    assert {v["saved_by"] for v in listed} == {"admin"}
    current = {k: v for k, v in reader.get("/api/agents/helper").json().items()}
    current.pop("updated_at")
    assert listed[0]["profile"] == current  # the fields as GET gives them
    one = reader.get("/api/agents/helper/versions/1").json()
    assert one == listed[2] and set(one) >= {"version", "saved_at", "saved_by", "profile"}
    entry = AuditEntry.objects.filter(action="agent_profile_changed").order_by("at").last()
    assert entry is not None and entry.data["version"] == 3


def test_versions_are_read_only_and_missing_ones_say_so(people) -> None:
    admin = bearer(people["admin"])
    send(admin, "post", "/api/agents", {"name": "helper", "system_prompt": "One."})
    for method in ("put", "patch", "delete", "post"):
        response = send(admin, method, "/api/agents/helper/versions/1", {"system_prompt": "x"})
        assert response.status_code == 405, method
        assert response.json()["error"]["code"] == "method_not_allowed"
    assert send(admin, "post", "/api/agents/helper/versions", {}).status_code == 405
    missing = admin.get("/api/agents/helper/versions/7")
    assert missing.status_code == 404
    assert "no version 7" in missing.json()["error"]["message"]
    assert "versions 1 to 1" in missing.json()["error"]["message"]
    huge = admin.get(f"/api/agents/helper/versions/{10**20}")
    assert huge.status_code == 404
    ghost = admin.get("/api/agents/ghost/versions")
    assert ghost.status_code == 404 and "ghost" in ghost.json()["error"]["message"]
    assert ProfileVersion.objects.filter(profile__name="helper").count() == 1


def test_a_version_never_changes(people) -> None:
    profile = profiles.save_profile({"name": "helper", "system_prompt": "One."})
    version = ProfileVersion.objects.get(profile=profile)
    with pytest.raises(ValueError, match="immutable"):
        version.save()
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        ProfileVersion.objects.filter(pk=version.pk).update(data={"system_prompt": "forged"})
    version.refresh_from_db()
    assert version.data["system_prompt"] == "One."


def test_a_run_records_and_runs_the_version_it_started_with(people, scripted, enqueued) -> None:
    profile = profiles.save_profile(
        {"name": "helper", "system_prompt": "Version one for {{user}}.", "allowed_tools": []}
    )
    run = actions.do_create_run(user=people["operator"], task="Where is A1?", agent_name="helper")
    assert run.agent_version == 1
    # The profile changes while the run is queued: the run still runs version 1.
    profiles.save_profile(
        {"system_prompt": "Version two.", "max_iterations": 1}, profile, partial=True
    )
    scripted.enqueue(call("lookup", order_id="A1"), "Delivered.")
    assert engine.execute_run(run.pk) == "succeeded"
    started = RunEvent.objects.get(run=run, type="run_started").data
    assert started["agent_version"] == 1
    assert started["system_prompt"].startswith("Version one for operator.")
    assert started["max_iterations"] == 20  # version 1's, not version 2's 1
    body = bearer(people["operator"]).get(f"/api/runs/{run.pk}").json()
    assert body["agent_version"] == 1 and body["mode"] == "normal" and body["forked_from"] is None
    second = actions.do_create_run(user=people["operator"], task="again", agent_name="helper")
    assert second.agent_version == 2


def test_a_profile_saved_without_a_version_gets_one_when_a_run_starts(people, enqueued) -> None:
    seeded = AgentProfile.objects.get(name="triage")  # seed_profiles writes no version
    assert not ProfileVersion.objects.filter(profile=seeded).exists()
    run = actions.do_create_run(user=people["operator"], task="x", agent_name="triage")
    assert run.agent_version == 1
    again = actions.do_create_run(user=people["operator"], task="y", agent_name="triage")
    assert again.agent_version == 1  # unchanged: the same version
    AgentProfile.objects.filter(pk=seeded.pk).update(max_iterations=3)  # as the admin might
    third = actions.do_create_run(user=people["operator"], task="z", agent_name="triage")
    assert third.agent_version == 2
    assert ProfileVersion.objects.get(profile=seeded, n=2).data["max_iterations"] == 3


def test_restore_saves_an_old_version_as_a_new_one(people) -> None:
    profile = profiles.save_profile(
        {"name": "helper", "system_prompt": "One.", "approval_policies": {}}
    )
    profiles.save_profile({"system_prompt": "Two.", "max_iterations": 4}, profile, partial=True)
    with pytest.raises(actions.NotAllowed):
        profiles.restore_version(profile, 1, actor=people["operator"])
    restored = profiles.restore_version(profile, 1, actor=people["admin"])
    assert restored.system_prompt == "One." and restored.max_iterations == 20
    newest = versions.listing(profile)[0]
    assert newest.n == 3 and newest.restored_from == 1
    assert newest.saved_by == people["admin"]
    assert newest.data == ProfileVersion.objects.get(profile=profile, n=1).data
    with pytest.raises(actions.NotFound, match="no version 9"):
        profiles.restore_version(profile, 9, actor=people["admin"])
    assert ProfileVersion.objects.filter(profile=profile).count() == 3


def test_a_diff_names_each_changed_field() -> None:
    a = {"system_prompt": "Line one.\nLine two.", "max_iterations": 20, "allowed_tools": ["x"]}
    b = {"system_prompt": "Line one.\nLine 2.", "max_iterations": 20, "allowed_tools": ["x", "y"]}
    changes = versions.diff(a, b)
    assert [c.field for c in changes] == ["system_prompt", "allowed_tools"]
    prompt = changes[0]
    assert ("del", "-Line two.") in prompt.lines and ("add", "+Line 2.") in prompt.lines
    assert versions.diff(a, a) == []


def test_the_data_migration_gives_existing_profiles_version_1(people) -> None:
    migration = importlib.import_module("agentweb.runs.migrations.0013_profile_versions")
    ProfileVersion.objects.all().delete()
    migration.first_versions(apps, None)
    for profile in AgentProfile.objects.all():
        only = ProfileVersion.objects.get(profile=profile)
        assert only.n == 1 and only.data == versions.snapshot(profile), profile.name
