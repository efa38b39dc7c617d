"""One ``risk_of(tool, profile)`` for the Django side (``agentweb.runs.toolset``): the
profile's override, else the tool's own risk, else "high" (fail closed), and the paths
production asks it on: the journal's audit of high-risk calls, a run's actions, the
profile check of "never" policies."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from agentweb.runs import delegation, engine, toolset
from agentweb.runs.models import AgentProfile, AuditEntry, Run, ToolExecution
from agentweb.runtime.selection import make_search_tool
from agentweb.runtime.tools import ToolRegistry


def profile(**fields: Any) -> AgentProfile:
    return AgentProfile(name="p", system_prompt="x", **fields)


def test_it_is_the_override_else_the_tools_own_else_high(sample_registry: None) -> None:
    assert toolset.risk_of("lookup") == "low"
    assert toolset.risk_of("pay_out") == "high"
    assert toolset.risk_of("note", profile()) == "medium"
    assert toolset.risk_of("lookup", profile(risk_overrides={"lookup": "high"})) == "high"
    assert toolset.risk_of("pay_out", profile(risk_overrides={"pay_out": "medium"})) == "medium"
    # fail closed: a tool nobody loaded, an override that is no risk level
    assert toolset.risk_of("gone_tool") == "high"
    assert toolset.risk_of("gone_tool", profile(risk_overrides={"lookup": "low"})) == "high"
    assert toolset.risk_of("lookup", profile(risk_overrides={"lookup": "harmless"})) == "high"
    assert toolset.risk_of("lookup", profile(risk_overrides=["not", "a", "dict"])) == "low"


def test_agentwebs_own_tools_have_the_risk_their_tools_declare(sample_registry: None) -> None:
    built = [
        *delegation.tools_for(profile(delegates=["someone"])),
        make_search_tool(ToolRegistry(list(toolset.registry()))),
    ]
    assert sorted(t.name for t in built) == sorted(toolset.BUILTIN_RISK)
    assert {t.name: t.risk for t in built} == {n: toolset.risk_of(n) for n in toolset.BUILTIN_RISK}


@pytest.fixture
def run(people: dict[str, Any], sample_registry: None) -> Run:
    agent = AgentProfile.objects.create(
        name="careful", system_prompt="x", risk_overrides={"lookup": "medium"}
    )
    return Run.objects.create(task="t", agent=agent, created_by=people["operator"])


def test_the_journal_audits_high_risk_and_unknown_tools_only(run: Run) -> None:
    journal = engine.journal_for(run)
    for n, name in enumerate(["search_tools", "gone_tool", "pay_out", "note", "delegate_task"]):
        journal.begin(f"c{n}", name, {})
        journal.finish(f"c{n}", True, {}, None, 1.0)
    audited = AuditEntry.objects.filter(action="high_risk_tool_executed", run=run)
    assert sorted(a.data["tool"] for a in audited) == ["gone_tool", "pay_out"]


def test_a_runs_actions_are_its_medium_and_high_risk_calls_unknown_ones_included(
    run: Run,
) -> None:
    for n, name in enumerate(["search_tools", "wait_for_tasks", "gone_tool", "lookup", "note"]):
        ToolExecution.objects.create(
            run=run, call_id=f"c{n}", tool=name, status=ToolExecution.Status.SUCCEEDED
        )
    assert [a["tool"] for a in run.actions()] == ["gone_tool", "lookup", "note"]  # lookup: override


def test_never_for_a_high_risk_tool_is_refused_and_an_unknown_one_named(
    sample_registry: None, transactional_db: None
) -> None:
    profile(approval_policies={"lookup": "never", "note": "never"}).full_clean()
    with pytest.raises(ValidationError, match="pay_out is a high-risk tool"):
        profile(approval_policies={"pay_out": "never"}).full_clean()
    with pytest.raises(ValidationError, match="lookup is a high-risk tool"):
        profile(
            approval_policies={"lookup": "never"}, risk_overrides={"lookup": "high"}
        ).full_clean()
    with pytest.raises(ValidationError) as refused:
        profile(approval_policies={"gone_tool": "never"}).full_clean()
    assert refused.value.message_dict["approval_policies"][0].startswith("unknown tools: gone_tool")
