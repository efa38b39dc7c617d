"""How a profile becomes a runtime Agent: its validator (none unless named), its tool
selection, and the domain's context hints."""

from __future__ import annotations

from typing import Any

import pytest

from agentweb.runs import agents, toolset, wiring
from agentweb.runs.models import AgentProfile, Run
from agentweb.runtime.selection import SEARCH_TOOL
from agentweb.shop.validators import claims_validator


def _run(people: dict[str, Any], profile: AgentProfile, model: str = "demo") -> Run:
    return Run.objects.create(
        task="Where is my parcel A1005?", agent=profile, model=model, created_by=people["operator"]
    )


@pytest.fixture
def real_model(monkeypatch: pytest.MonkeyPatch) -> str:
    """A non-scripted model spec that works offline (nothing is called)."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    return "openai:gpt-test"


def test_the_seeded_ticket_profiles_name_the_claims_validator(people):
    for name in ("ticket-assistant", "triage"):
        profile = AgentProfile.objects.get(name=name)
        agent = wiring.build_agent(_run(people, profile))
        assert agent.validator is claims_validator
        assert agent.validator_name == "agentweb.shop.validators.claims_validator"


def test_a_profile_without_a_validator_gets_none(people):
    profile = AgentProfile.objects.create(name="plain", system_prompt="Help.")
    agent = wiring.build_agent(_run(people, profile))
    assert agent.validator is None


def test_tool_selection_all_offers_exactly_the_allowed_tools(people, real_model):
    profile = AgentProfile.objects.create(name="all-tools", system_prompt="Help.")
    agent = wiring.build_agent(_run(people, profile, real_model))
    assert SEARCH_TOOL not in agent.tools
    assert sorted(agent.tools.names()) == sorted(agents.registry().names())
    assert agent.context_policy.top_n is None  # type: ignore[attr-defined]


def test_tool_selection_n_offers_the_top_n_and_search_tools(people, real_model):
    profile = AgentProfile.objects.create(name="top5", system_prompt="Help.", tool_selection="5")
    agent = wiring.build_agent(_run(people, profile, real_model))
    assert SEARCH_TOOL in agent.tools
    assert agent.context_policy.top_n == 5  # type: ignore[attr-defined]


def test_a_scripted_model_sees_every_tool_whatever_the_selection(people):
    profile = AgentProfile.objects.create(name="top5d", system_prompt="Help.", tool_selection="5")
    agent = wiring.build_agent(_run(people, profile))
    assert SEARCH_TOOL not in agent.tools and agent.context_policy.top_n is None  # type: ignore[attr-defined]


def test_the_ticket_domain_supplies_the_context_hints(people):
    hints = toolset.context_hints()
    assert "order_id" in hints.fact_keys and "parcel" in hints.synonyms
    assert "customer-support" in (hints.summary_prompt or "")
    profile = AgentProfile.objects.create(name="hinted", system_prompt="Help.")
    policy: Any = wiring.build_agent(_run(people, profile)).context_policy
    assert "order_id" in policy.fact_keys and "refund_amount" in policy.money_keys
    assert "customer-support" in policy.summary_prompt


def test_another_domain_gets_none_of_the_ticket_hints(people, sample_registry):
    assert toolset.context_hints().fact_keys == ()
    assert toolset.demo_factory() is None
