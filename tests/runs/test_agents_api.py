"""Agent profiles as data: /api/agents, `manage.py agents export|import`, one set of checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.runs.models import AgentProfile, AuditEntry, Run

FIELDS = {
    "name", "description", "system_prompt", "model", "allowed_tools", "tool_selection",
    "validator", "approval_policies", "risk_overrides", "max_iterations",
    "context_budget_tokens", "delegates",
}  # fmt: skip


def bearer(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def send(client: Client, method: str, url: str, data: Any) -> Any:
    return getattr(client, method)(url, data=json.dumps(data), content_type="application/json")


def test_everyone_signed_in_reads_the_profiles(people) -> None:
    assert Client().get("/api/agents").status_code == 401
    body = bearer(people["operator"]).get("/api/agents").json()
    names = [a["name"] for a in body["agents"]]
    assert names == sorted(names) and {"ticket-assistant", "triage"} <= set(names)
    one = next(a for a in body["agents"] if a["name"] == "ticket-assistant")
    assert set(one) >= FIELDS
    assert one["validator"] == "agentweb.shop.validators.claims_validator"
    assert one["tool_selection"] == "all" and one["model"] is None


def test_only_admins_write(people) -> None:
    client = bearer(people["approver"])
    assert (
        send(client, "post", "/api/agents", {"name": "x", "system_prompt": "p"}).status_code == 403
    )
    assert send(client, "put", "/api/agents/triage", {"system_prompt": "p"}).status_code == 403
    assert client.delete("/api/agents/triage").status_code == 403


def test_create_with_only_name_and_prompt_gets_the_defaults(people) -> None:
    client = bearer(people["admin"])
    response = send(client, "post", "/api/agents", {"name": "helper", "system_prompt": "Help."})
    assert response.status_code == 201
    made = response.json()
    assert made["validator"] is None and made["tool_selection"] == "all"
    assert made["model"] is None and made["allowed_tools"] == [] and made["delegates"] == []
    assert made["vision"] is True and made["max_iterations"] == 20
    assert client.get("/api/agents/helper").json() == made
    assert AuditEntry.objects.filter(action="agent_profile_created").exists()
    again = send(client, "post", "/api/agents", {"name": "helper", "system_prompt": "Again."})
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"allowed_tools": ["get_order", "launch_rocket"]}, "allowed_tools", "launch_rocket"),
        ({"approval_policies": {"nuke": "always"}}, "approval_policies", "nuke"),
        ({"risk_overrides": {"nuke": "high"}}, "risk_overrides", "nuke"),
        ({"validator": "agentweb.nowhere.check"}, "validator", "agentweb.nowhere.check"),
        ({"validator": "not a path"}, "validator", "dotted path"),
        ({"model": "mistral:large"}, "model", "mistral:large"),
        ({"model": "anthropic:claude-x"}, "model", "ANTHROPIC_API_KEY"),
        ({"tool_selection": 0}, "tool_selection", "all"),
        ({"tool_selection": "many"}, "tool_selection", "all"),
        ({"delegates": ["ghost"]}, "delegates", "ghost"),
        ({"max_iterations": "ten"}, "max_iterations", "whole number"),
        ({"name": "has space"}, "name", "slug"),
        ({"vision": "yes"}, "vision", "true or false"),
        ({"colour": "red"}, "__all__", "colour"),
    ],
)
def test_bad_fields_are_422_naming_the_field(people, monkeypatch, data, field, words) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    body = {"name": "probe", "system_prompt": "p", **data}
    response = send(bearer(people["admin"]), "post", "/api/agents", body)
    assert response.status_code == 422, response.content
    err = response.json()["error"]
    assert err["code"] == "invalid_profile"
    assert field in err["details"] and words in err["details"][field]
    assert field in err["message"]
    assert not AgentProfile.objects.filter(name="probe").exists()


def test_built_in_tools_may_have_policies(people) -> None:
    body = {
        "name": "builtin-policies",
        "system_prompt": "p",
        "risk_overrides": {"delegate_task": "medium"},
        "approval_policies": {"search_tools": "never"},
    }
    assert send(bearer(people["admin"]), "post", "/api/agents", body).status_code == 201


def test_missing_required_fields_are_named(people) -> None:
    response = send(bearer(people["admin"]), "post", "/api/agents", {"description": "d"})
    assert response.status_code == 422
    assert set(response.json()["error"]["details"]) == {"name", "system_prompt"}


def test_a_model_with_its_key_set_is_accepted(people, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k-test")
    body = {"name": "claude", "system_prompt": "p", "model": "anthropic:claude-x"}
    response = send(bearer(people["admin"]), "post", "/api/agents", body)
    assert response.status_code == 201 and response.json()["model"] == "anthropic:claude-x"


def test_put_replaces_patch_changes_and_unknown_names_are_404(people) -> None:
    client = bearer(people["admin"])
    body = {"name": "p1", "system_prompt": "p", "description": "first", "tool_selection": 6}
    assert send(client, "post", "/api/agents", body).status_code == 201
    patched = send(client, "patch", "/api/agents/p1", {"description": "second"}).json()
    assert patched["description"] == "second" and patched["tool_selection"] == 6
    put = send(client, "put", "/api/agents/p1", {"system_prompt": "new"}).json()
    assert (
        put["system_prompt"] == "new"
        and put["description"] == ""
        and put["tool_selection"] == "all"
    )
    renamed = send(client, "put", "/api/agents/p1", {"name": "p2", "system_prompt": "p"})
    assert renamed.status_code == 422 and "name" in renamed.json()["error"]["details"]
    assert client.get("/api/agents/nobody").status_code == 404
    assert send(client, "put", "/api/agents/nobody", {"system_prompt": "p"}).status_code == 404


def test_delete_removes_an_unused_profile_and_keeps_one_with_runs(people) -> None:
    client = bearer(people["admin"])
    send(client, "post", "/api/agents", {"name": "gone", "system_prompt": "p"})
    assert client.delete("/api/agents/gone").status_code == 204
    assert not AgentProfile.objects.filter(name="gone").exists()
    Run.objects.create(
        task="t", agent=AgentProfile.objects.get(name="triage"), created_by=people["admin"]
    )
    kept = client.delete("/api/agents/triage")
    assert kept.status_code == 409 and "1 run" in kept.json()["error"]["message"]


def test_export_prints_the_get_shape_and_import_round_trips(people, capsys, tmp_path) -> None:
    call_command("agents", "export")
    exported = json.loads(capsys.readouterr().out)
    api = bearer(people["operator"]).get("/api/agents").json()
    assert exported == api
    call_command("agents", "export", "triage")
    only = json.loads(capsys.readouterr().out)
    assert [a["name"] for a in only["agents"]] == ["triage"]
    with pytest.raises(CommandError, match="nobody"):
        call_command("agents", "export", "nobody")

    triage = only["agents"][0]
    triage["description"] = "Changed by import."
    new = {"name": "lead", "system_prompt": "Lead.", "delegates": ["helper2"]}
    helper = {"name": "helper2", "system_prompt": "Help.", "delegates": ["lead"]}
    file = tmp_path / "agents.json"
    file.write_text(json.dumps({"agents": [triage, new, helper]}))
    call_command("agents", "import", str(file))
    out = capsys.readouterr().out
    assert "2 created (lead, helper2)" in out and "1 updated (triage)" in out
    assert AgentProfile.objects.get(name="triage").description == "Changed by import."
    assert AgentProfile.objects.get(name="lead").delegates == ["helper2"]


def test_import_reads_yaml(people, tmp_path) -> None:
    file = tmp_path / "agents.yaml"
    file.write_text(
        "agents:\n"
        "  - name: yaml-agent\n"
        "    system_prompt: |\n"
        "      You help.\n"
        "    tool_selection: 4\n"
        "    allowed_tools: [get_order, search_kb]\n"
    )
    call_command("agents", "import", str(file))
    made = AgentProfile.objects.get(name="yaml-agent")
    assert made.top_n == 4 and made.allowed_tools == ["get_order", "search_kb"]
    assert made.system_prompt == "You help.\n"


def test_an_import_with_one_bad_profile_changes_nothing(people, tmp_path) -> None:
    before = AgentProfile.objects.get(name="triage").description
    file = tmp_path / "agents.json"
    good = {"name": "triage", "system_prompt": "p", "description": "overwritten"}
    bad = {"name": "bad", "system_prompt": "p", "allowed_tools": ["launch_rocket"]}
    file.write_text(json.dumps([good, bad]))
    with pytest.raises(CommandError, match="bad: allowed_tools: unknown tools: launch_rocket"):
        call_command("agents", "import", str(file))
    assert AgentProfile.objects.get(name="triage").description == before
    assert not AgentProfile.objects.filter(name="bad").exists()


@pytest.mark.parametrize("text", ["{not json: [", "[1, 2]", '{"agents": "x"}'])
def test_an_unreadable_import_file_is_refused_with_a_message(people, tmp_path, text) -> None:
    file = tmp_path / "agents.txt"
    file.write_text(text)
    with pytest.raises(CommandError):
        call_command("agents", "import", str(file))


def test_the_openapi_document_describes_the_agents_api(people) -> None:
    doc = bearer(people["operator"]).get("/api/openapi.json").json()
    assert set(doc["paths"]["/api/agents"]) == {"get", "post"}
    assert {"get", "put", "patch", "delete"} <= set(doc["paths"]["/api/agents/{name}"])
    agent = doc["components"]["schemas"]["Agent"]
    assert agent["required"] == ["name", "system_prompt"]
    assert set(agent["properties"]) >= FIELDS
    events = doc["components"]["schemas"]["Event"]["properties"]["type"]["enum"]
    assert "completion_objected" in events


def test_the_documented_profile_bodies_are_what_the_endpoints_refuse(people) -> None:
    """Each profile body's schema says which fields are required and that unknown ones are
    refused; a body with nothing in it, or with an unknown field, is refused exactly so."""
    client = bearer(people["admin"])
    send(client, "post", "/api/agents", {"name": "doc", "system_prompt": "p"})
    paths = client.get("/api/openapi.json").json()["paths"]
    for method, path in [
        ("post", "/api/agents"),
        ("put", "/api/agents/{name}"),
        ("patch", "/api/agents/{name}"),
    ]:
        schema = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
        url = path.replace("{name}", "doc")
        empty = send(client, method, url, {})
        if schema.get("required"):
            assert empty.status_code == 422, method
            assert set(empty.json()["error"]["details"]) == set(schema["required"]), method
        else:
            assert empty.status_code == 200, method
        assert schema["additionalProperties"] is False
        name = "fresh" if method == "post" else "doc"
        unknown = send(client, method, url, {"name": name, "system_prompt": "p", "colour": 1})
        assert unknown.status_code == 422
        assert "colour" in unknown.json()["error"]["details"]["__all__"]


def test_a_new_profile_has_the_documented_defaults(people) -> None:
    client = bearer(people["admin"])
    made = send(client, "post", "/api/agents", {"name": "plain", "system_prompt": "p"}).json()
    doc = client.get("/api/openapi.json").json()
    body = doc["paths"]["/api/agents"]["post"]["requestBody"]["content"]["application/json"]
    defaults = {
        name: spec["default"]
        for name, spec in body["schema"]["properties"].items()
        if "default" in spec
    }
    assert set(defaults) == FIELDS - {"name", "system_prompt"} | {"vision", "budget"}
    assert {name: made[name] for name in defaults} == defaults


def test_a_required_field_of_the_wrong_type_says_so(people) -> None:
    response = send(bearer(people["admin"]), "post", "/api/agents", {"name": 5})
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {
        "name": "must be a string",
        "system_prompt": "required",
    }
