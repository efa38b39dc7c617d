"""Budgets (DESIGN §15) through the engine, in-process: a profile's per-run cost and tokens
(sub-runs count toward their top run), a profile's and a team's daily cost in the
installation's TIME_ZONE day; the run fails naming the budget, makes no further model
call, the run page says so, the metric counts it, the ledger and /spend/ show the spend."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone

from agentweb.budgets import ledger
from agentweb.budgets.check import Check
from agentweb.budgets.models import DailySpend
from agentweb.observability import metrics
from agentweb.observability.views import database_gauges
from agentweb.runs import actions, engine, lifecycle
from agentweb.runs.models import AgentProfile, Run, RunEvent
from agentweb.runtime import AssistantMessage, ModelResponse, Usage
from agentweb.runtime.testing import call
from agentweb.teams.actions import do_save_team
from agentweb.teams.models import Team
from tests.tickets.factories import make_ticket

# 10 $ per million tokens in and out: 1,000 + 1,000 tokens cost $0.02.
PRICE = {"priced": (10.0, 10.0)}


@pytest.fixture(autouse=True)
def _prices(settings: Any) -> None:
    settings.AGENTWEB_PRICES = PRICE


def priced(reply: Any, tokens: int = 1000) -> ModelResponse:
    """A scripted reply of the priced model that used ``tokens`` in and ``tokens`` out."""
    message = AssistantMessage(tool_calls=[reply]) if not isinstance(reply, str) else None
    message = message or AssistantMessage(content=reply)
    finish = "tool_calls" if message.tool_calls else "stop"
    return ModelResponse(
        message, Usage(input_tokens=tokens, output_tokens=tokens), "priced", 1.0, finish
    )


def looks(n: int, tokens: int = 1000) -> list[ModelResponse]:
    return [priced(call("lookup", order_id=f"A{i}"), tokens) for i in range(n)]


def profile(name: str = "ticket-assistant", **budget: Any) -> AgentProfile:
    agent = AgentProfile.objects.get(name=name)
    agent.budget = budget
    agent.validator = ""  # the scripted answers are not about the shop
    agent.save()
    return agent


def start(people: dict[str, Any], **kw: Any) -> Run:
    return actions.do_create_run(user=people["operator"], task=kw.pop("task", "look"), **kw)


def last(run: Run) -> dict[str, Any]:
    event = RunEvent.objects.filter(run=run).order_by("-seq").first()
    assert event is not None
    return {"type": event.type, **event.data}


def model_calls(run: Run) -> int:
    return RunEvent.objects.filter(run=run, type="model_called").count()


def test_a_run_stops_at_its_profiles_cost_per_run(people, scripted, enqueued) -> None:
    profile(max_cost_usd_per_run=0.05)
    scripted.enqueue(*looks(5), priced("done"))
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.FAILED
    run.refresh_from_db()
    # $0.02, $0.04, $0.06: the fourth call is never made.
    assert model_calls(run) == 3 and scripted.remaining == 3
    assert run.failure_reason == (
        "budget exhausted: this run (with its sub-runs) has cost $0.0600, the "
        "max_cost_usd_per_run of profile ticket-assistant is $0.0500"
    )
    assert last(run) == {"type": "run_failed", "reason": run.failure_reason, "budget": "run_cost"}
    assert run.usage["cost_usd"] == pytest.approx(0.06)
    # The ledger has the three calls for the profile, today.
    row = DailySpend.objects.get(kind="profile", ref=run.agent_id)
    assert (row.day, row.cost_usd, row.model_calls, row.tokens) == (
        timezone.localdate(),
        Decimal("0.06"),
        3,
        6000,
    )
    # The run page says so.
    client = Client()
    client.force_login(people["operator"])
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Failed: budget exhausted: this run (with its sub-runs) has cost $0.0600" in page


def test_a_run_stops_at_its_profiles_tokens_per_run(people, scripted, enqueued) -> None:
    profile(max_tokens_per_run=2500)
    scripted.enqueue(*looks(4), priced("done"))
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.FAILED
    run.refresh_from_db()
    assert model_calls(run) == 2  # 2,000 then 4,000 tokens
    assert run.failure_reason == (
        "budget exhausted: this run (with its sub-runs) has used 4,000 tokens, the "
        "max_tokens_per_run of profile ticket-assistant is 2,500"
    )
    assert last(run)["budget"] == "run_tokens"


def test_under_its_budgets_a_run_is_not_touched(people, scripted, enqueued) -> None:
    profile(max_cost_usd_per_run=1.0, max_tokens_per_run=100_000, daily_cost_usd=5)
    scripted.enqueue(*looks(2), priced("All looked up."))
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    scripted.assert_complete()


def test_sub_runs_count_toward_their_top_run(people, scripted, enqueued) -> None:
    top_profile = profile(max_cost_usd_per_run=0.05)
    helper = AgentProfile.objects.create(name="helper", system_prompt="You help.")
    top = start(people)
    # A child of the top run that has spent $0.05 already (its rows as the engine stores).
    child = Run.objects.create(
        task="sub-task",
        agent=helper,
        model="priced",
        created_by=people["operator"],
        parent=top,
        root=top,
        depth=2,
        parent_call_id="c1",
        usage={"cost_usd": 0.05, "input_tokens": 2500, "output_tokens": 2500},
    )
    refused = Check(top).exceeded()
    assert refused is not None and refused.scope == "run_cost"
    assert "this run (with its sub-runs) has cost $0.0500" in refused.reason
    # The child is stopped too: its top run's budget is reached.
    from_child = Check(child).exceeded()
    assert from_child is not None and from_child.reason == (
        f"budget exhausted: its top run #{top.pk} (with all its sub-runs) has cost $0.0500, "
        f"the max_cost_usd_per_run of profile {top_profile.name} is $0.0500"
    )
    # Through the engine: the top run makes no model call at all.
    assert engine.execute_run(top.pk) == Run.Status.FAILED
    assert model_calls(top) == 0 and scripted.remaining == 0


def test_a_profiles_day_is_its_whole_day_in_the_installations_time_zone(
    people, scripted, enqueued
) -> None:
    profile(daily_cost_usd=0.05)
    scripted.enqueue(*looks(2), priced("first done"))
    first = start(people)
    # Its third call was made at $0.04 spent today: under the limit, so it finished.
    assert engine.execute_run(first.pk) == Run.Status.SUCCEEDED
    second = start(people)
    assert engine.execute_run(second.pk) == Run.Status.FAILED
    second.refresh_from_db()
    assert model_calls(second) == 0
    day = timezone.localdate()
    assert second.failure_reason == (
        f"budget exhausted: profile ticket-assistant has spent $0.0600 today ({day}, UTC), "
        "its daily_cost_usd is $0.0500"
    )
    assert last(second)["budget"] == "profile_daily_cost"
    # Yesterday's spend does not count today.
    DailySpend.objects.update(day=day - timedelta(days=1))
    scripted.enqueue(priced("third done"))
    third = start(people)
    assert engine.execute_run(third.pk) == Run.Status.SUCCEEDED


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago"])
def test_the_ledgers_day_is_the_time_zones(people, scripted, enqueued, settings, zone) -> None:
    settings.TIME_ZONE = zone  # UTC+14 and UTC-11: at any hour one is on another date
    scripted.enqueue(priced("done"))
    run = start(people)
    profile()
    engine.execute_run(run.pk)
    assert DailySpend.objects.get(kind="profile").day == datetime.now(ZoneInfo(zone)).date()
    assert ledger.today() == datetime.now(ZoneInfo(zone)).date()


def test_a_teams_daily_cost_stops_its_runs_and_only_its(people, scripted, enqueued) -> None:
    profile()
    operator = people["operator"]
    billing = do_save_team(
        None,
        actor=None,
        name="Billing",
        queues=["billing"],
        members=[operator],
        daily_cost_usd="0.05",
    )
    do_save_team(
        None, actor=None, name="Shipping", queues=["shipping"], members=[people["operator2"]]
    )
    ours, theirs = make_ticket("ours", queue="billing"), make_ticket("theirs", queue="shipping")
    scripted.enqueue(*looks(2), priced("done"))
    first = start(people, ticket_id=ours.pk)
    assert engine.execute_run(first.pk) == Run.Status.SUCCEEDED  # $0.06 for Billing
    assert DailySpend.objects.get(kind="team", ref=billing.pk).cost_usd == Decimal("0.06")
    # Another Billing run (a run without a ticket belongs to its starter's teams): refused.
    second = start(people)
    assert engine.execute_run(second.pk) == Run.Status.FAILED
    second.refresh_from_db()
    assert second.failure_reason.startswith(
        "budget exhausted: team Billing has spent $0.0600 today ("
    )
    assert second.failure_reason.endswith("its daily_cost_usd is $0.0500")
    assert last(second)["budget"] == "team_daily_cost"
    # Shipping's ticket: not Billing's budget.
    admin = people["admin"]
    scripted.enqueue(priced("theirs done"))
    other = actions.do_create_run(user=admin, task="look", ticket_id=theirs.pk)
    assert engine.execute_run(other.pk) == Run.Status.SUCCEEDED


def test_the_metric_counts_runs_a_budget_stopped(people, scripted, enqueued) -> None:
    profile(max_tokens_per_run=1)

    def count() -> float:
        assert metrics.flush()
        text = metrics.exposition(database_gauges()).decode()
        line = next(
            (
                row
                for row in text.splitlines()
                if row.startswith('agentweb_budget_exhausted_total{scope="run_tokens"}')
            ),
            None,
        )
        return float(line.split()[-1]) if line else 0.0

    before = count()
    for _ in range(2):
        scripted.enqueue(*looks(1))
        run = start(people)
        assert engine.execute_run(run.pk) == Run.Status.FAILED
    assert count() == before + 2


def test_admins_see_spend_per_team_and_profile(people, scripted, enqueued) -> None:
    profile(daily_cost_usd=1, max_cost_usd_per_run=0.5)
    team = do_save_team(
        None,
        actor=None,
        name="Billing",
        queues=["billing"],
        members=[people["operator"]],
        daily_cost_usd="0.04",
    )
    scripted.enqueue(*looks(2), priced("done"))
    engine.execute_run(start(people).pk)
    admin = Client()
    admin.force_login(people["admin"])
    report = admin.get("/api/spend").json()
    assert report["time_zone"] == "UTC" and report["day"] == str(timezone.localdate())
    billing = next(t for t in report["teams"] if t["name"] == "Billing")
    assert billing == {
        "id": team.pk,
        "name": "Billing",
        "cost_usd": 0.04,  # the team's limit stopped the run after two calls
        "tokens": 4000,
        "model_calls": 2,
        "unpriced_calls": 0,
        "daily_cost_usd": 0.04,
        "used": 1.0,
    }
    assistant = next(p for p in report["profiles"] if p["name"] == "ticket-assistant")
    assert assistant["cost_usd"] == 0.04 and assistant["daily_cost_usd"] == 1.0
    assert assistant["max_cost_usd_per_run"] == 0.5 and assistant["used"] == 0.04
    yesterday = admin.get("/api/spend", {"day": str(timezone.localdate() - timedelta(days=1))})
    assert next(t for t in yesterday.json()["teams"] if t["name"] == "Billing")["cost_usd"] == 0
    assert admin.get("/api/spend", {"day": "someday"}).status_code == 400
    page = admin.get("/spend/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'id="team-{team.pk}" class="over"' in html and "$0.0400" in html
    assert 'href="/spend/"' in html  # in the admin's menu
    operator = Client()
    operator.force_login(people["operator"])
    assert operator.get("/api/spend").status_code == 403
    assert operator.get("/spend/").status_code == 403
    assert 'href="/spend/"' not in operator.get("/runs/").content.decode()


def test_a_runs_first_budget_check_is_two_queries_and_later_ones_none(
    people, django_assert_num_queries
) -> None:
    """The profiles' budgets, then the run's teams with their limits (one query, which
    the ledger's owners reuse); within LIMITS_TTL_SECONDS no query at all when no limit
    applies."""

    profile()
    do_save_team(None, actor=None, name="Billing", queues=["billing"], members=[people["operator"]])
    run = Run.objects.select_related("agent").get(pk=start(people).pk)
    check = Check(run)
    with django_assert_num_queries(2):
        assert check.exceeded() is None
    assert ledger.owners(run).teams and ledger.owners(run).team_limits == ()
    with django_assert_num_queries(0):
        assert check.exceeded() is None


@pytest.mark.django_db(transaction=True)
def test_a_top_runs_teams_come_with_its_claim(people, django_assert_num_queries) -> None:
    """The teams a run's calls count toward are read in the worker's claim of the run
    (``ledger.TEAMS_AT_CLAIM``, one statement of the claim's round trip), and they are the
    teams ``ledger.owners`` finds with queries of its own: the starter's teams for a run
    without a ticket, the teams owning the ticket's queue, none for a ticket without one.
    (A real commit: the claim sends its statements together only outside a transaction.)"""
    profile()
    operator, admin = people["operator"], people["admin"]
    billing = do_save_team(
        None,
        actor=None,
        name="Billing",
        queues=["billing", "vip"],
        members=[operator],
        daily_cost_usd="5",
    )
    helpers = do_save_team(
        None, actor=None, name="Helpers", queues=["shipping"], members=[operator]
    )
    do_save_team(None, actor=None, name="Others", queues=["other"], members=[people["operator2"]])

    def on(queue: str) -> Run:
        return actions.do_create_run(
            user=admin, task="look", ticket_id=make_ticket(queue or "none", queue=queue).pk
        )

    cases = [
        (start(people), {billing.pk, helpers.pk}),
        (on("vip"), {billing.pk}),
        (on("shipping"), {helpers.pk}),
        (on("other"), {Team.objects.get(name="Others").pk}),
        (on(""), set()),
    ]
    for created, expected in cases:
        run = lifecycle.claim_and_read(created.pk, "a-worker")
        assert run is not None
        with django_assert_num_queries(0):
            found = ledger.owners(run)
        assert set(found.teams) == expected, created.task
        fresh = Run.objects.select_related("agent", "ticket").get(pk=created.pk)
        assert ledger.owners(fresh) == found  # what its own queries find
    assert found.team_limits == ()
    assert ledger.owners(Run.objects.get(pk=cases[1][0].pk)).team_limits == (
        (billing.pk, "Billing", Decimal("5")),
    )
