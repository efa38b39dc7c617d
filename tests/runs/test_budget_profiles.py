"""A profile's ``budget`` through the API, the /agents/ form, export/import and the OpenAPI
document (its schema generated from the pydantic model that checks it)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from agentweb.accounts.models import ApiToken
from agentweb.runs.models import AgentProfile


def bearer(user: Any) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user)}")


def send(client: Client, method: str, url: str, data: Any) -> Any:
    return getattr(client, method)(url, data=json.dumps(data), content_type="application/json")


def test_the_api_stores_shows_and_changes_a_budget(people) -> None:
    admin = bearer(people["admin"])
    made = send(
        admin,
        "post",
        "/api/agents",
        {"name": "capped", "system_prompt": "p", "budget": {"max_cost_usd_per_run": 0.5}},
    )
    assert made.status_code == 201 and made.json()["budget"] == {"max_cost_usd_per_run": 0.5}
    changed = send(
        admin,
        "patch",
        "/api/agents/capped",
        {"budget": {"max_tokens_per_run": 20000, "daily_cost_usd": 10}},
    )
    assert changed.status_code == 200
    assert changed.json()["budget"] == {"max_tokens_per_run": 20000, "daily_cost_usd": 10.0}
    assert AgentProfile.objects.get(name="capped").budget == changed.json()["budget"]
    cleared = send(admin, "patch", "/api/agents/capped", {"budget": None})
    assert cleared.json()["budget"] == {}
    plain = send(admin, "post", "/api/agents", {"name": "plain", "system_prompt": "p"})
    assert plain.json()["budget"] == {}


@pytest.mark.parametrize(
    ("budget", "says"),
    [
        ({"max_cost_usd_per_run": -1}, "max_cost_usd_per_run must be a number of US dollars"),
        ({"max_tokens_per_run": 2.5}, "max_tokens_per_run must be a whole number of tokens"),
        ({"max_tokens_per_run": 0}, "max_tokens_per_run must be a whole number of tokens"),
        ({"daily_cost_usd": "ten"}, "daily_cost_usd must be a number of US dollars"),
        ({"daily_cost_usd": True}, "daily_cost_usd must be a number of US dollars"),
        ({"per_week": 3}, "unknown key 'per_week'"),
        ("lots", "an object with any of"),
    ],
)
def test_a_bad_budget_is_refused_naming_the_field(people, budget: Any, says: str) -> None:
    answer = send(
        bearer(people["admin"]),
        "post",
        "/api/agents",
        {"name": "x", "system_prompt": "p", "budget": budget},
    )
    assert answer.status_code == 422
    assert says in answer.json()["error"]["details"]["budget"]
    assert not AgentProfile.objects.filter(name="x").exists()


def test_the_form_saves_a_budget_and_names_a_bad_one(people) -> None:
    client = Client()
    client.force_login(people["admin"])
    profile = AgentProfile.objects.get(name="ticket-assistant")
    page = client.get(f"/agents/{profile.pk}/").content.decode()
    assert 'id="field-budget"' in page
    data = {
        "description": profile.description,
        "model": "",
        "system_prompt": profile.system_prompt,
        "allowed_tools": json.dumps(profile.allowed_tools),
        "tool_selection": "all",
        "validator": profile.validator,
        "max_iterations": 10,
        "risk_overrides": json.dumps(profile.risk_overrides),
        "approval_policies": json.dumps(profile.approval_policies),
        "delegates": "[]",
        "context_budget_tokens": 16000,
        "vision": "on",
    }
    bad = client.post(f"/agents/{profile.pk}/", {**data, "budget": '{"daily_cost_usd": -2}'})
    assert (
        bad.status_code == 422
        and "daily_cost_usd must be a number of US dollars" in bad.content.decode()
    )
    saved = client.post(f"/agents/{profile.pk}/", {**data, "budget": '{"daily_cost_usd": 2}'})
    assert saved.status_code == 302
    profile.refresh_from_db()
    assert profile.budget == {"daily_cost_usd": 2}
    blank = client.post(f"/agents/{profile.pk}/", {**data, "budget": ""})
    assert blank.status_code == 302
    profile.refresh_from_db()
    assert profile.budget == {}


def test_export_and_import_carry_the_budget(people, tmp_path: Path) -> None:
    profile = AgentProfile.objects.get(name="triage")
    profile.budget = {"max_cost_usd_per_run": 0.25}
    profile.save()
    out = io.StringIO()
    call_command("agents", "export", "triage", stdout=out)
    exported = json.loads(out.getvalue())
    assert exported["agents"][0]["budget"] == {"max_cost_usd_per_run": 0.25}
    exported["agents"][0]["budget"] = {"daily_cost_usd": 3}
    path = tmp_path / "agents.json"
    path.write_text(json.dumps(exported))
    call_command("agents", "import", str(path), stdout=io.StringIO())
    profile.refresh_from_db()
    assert profile.budget == {"daily_cost_usd": 3.0}


def test_the_openapi_document_describes_budgets_and_spend(people) -> None:
    doc = bearer(people["operator"]).get("/api/openapi.json").json()
    body = doc["paths"]["/api/agents"]["post"]["requestBody"]["content"]["application/json"]
    budget = body["schema"]["properties"]["budget"]
    limits = budget["anyOf"][0]
    assert set(limits["properties"]) == {
        "max_cost_usd_per_run",
        "max_tokens_per_run",
        "daily_cost_usd",
    }
    assert limits["additionalProperties"] is False and budget["default"] == {}
    spend = doc["paths"]["/api/spend"]["get"]
    assert spend["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SpendReport"
    }
    report = doc["components"]["schemas"]["SpendReport"]
    assert set(report["properties"]) == {"day", "time_zone", "teams", "profiles"}
    assert "ProfileSpend" in doc["components"]["schemas"]
