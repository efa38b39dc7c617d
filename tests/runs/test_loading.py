"""The run a worker reads as it takes a run up (``runs.loading``): the same objects the
ORM's ``select_related(...).get(pk=...)`` gives, from SQL compiled once."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentweb.runs import actions
from agentweb.runs.loading import RELATED, run_for_worker
from agentweb.runs.models import Run
from tests.tickets.factories import make_ticket


def _fields(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


@pytest.mark.parametrize("with_ticket", [False, True])
def test_a_run_reads_as_the_orm_reads_it(people, with_ticket: bool) -> None:
    ticket = make_ticket("Late parcel", "Still nothing.") if with_ticket else None
    made = actions.do_create_run(
        user=people["operator"], task="Check order A1001", ticket_id=ticket.pk if ticket else None
    )
    Run.objects.filter(pk=made.pk).update(state={"x": [1, "two", None]}, usage={"model_calls": 2})
    theirs = Run.objects.select_related(*RELATED).get(pk=made.pk)
    ours = run_for_worker(made.pk)
    assert _fields(ours) == _fields(theirs)
    assert ours.state == {"x": [1, "two", None]} and ours.created_at.tzinfo is not None
    for name in RELATED:
        assert Run._meta.get_field(name).is_cached(ours)  # no query when read
        mine, orms = getattr(ours, name), getattr(theirs, name)
        assert (mine is None) == (orms is None)
        if mine is not None:
            assert type(mine) is type(orms) and _fields(mine) == _fields(orms)
    assert (ours.ticket is None) is (not with_ticket)
    assert not ours._state.adding and ours._state.db == "default"
    with CaptureQueriesContext(connection) as sent:
        run_for_worker(made.pk)
    assert len(sent) == 1


def test_a_missing_run_is_does_not_exist(people) -> None:
    with pytest.raises(Run.DoesNotExist):
        run_for_worker(987654321)


def test_compiled_rows_are_the_orms_rows(people) -> None:
    """The budget check's first look: a profile's budget (JSON), the teams of a queue (a
    list parameter) and of a member (a join), as the ORM's values_list gives them."""
    from agentweb.runs.loading import CompiledRows
    from agentweb.runs.models import AgentProfile
    from agentweb.teams.actions import do_save_team
    from agentweb.teams.models import Team

    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.budget = {"max_cost_usd_per_run": 0.5, "daily_cost_usd": "3.25"}
    profile.save()
    operator = people["operator"]
    do_save_team(None, actor=None, name="Billing", queues=["billing"], members=[operator])
    do_save_team(
        None, actor=None, name="Both", queues=["billing", "shipping"], members=[operator],
        daily_cost_usd="1.50",
    )  # fmt: skip
    columns = ("pk", "name", "daily_cost_usd")
    budgets = CompiledRows(
        lambda pk: AgentProfile.objects.filter(pk=pk).values_list("pk", "name", "budget"),
        [-7_000_000_101],
    )
    by_queue = CompiledRows(
        lambda q: Team.objects.filter(queues__contains=[q]).values_list(*columns),
        ["a stand-in queue"],
    )
    by_member = CompiledRows(
        lambda u: Team.objects.filter(members=u).values_list(*columns), [-7_000_000_102]
    )
    orm = AgentProfile.objects.filter(pk=profile.pk).values_list("pk", "name", "budget")
    assert budgets.rows(profile.pk) == list(orm)
    assert budgets.rows(profile.pk)[0][2] == profile.budget
    for queue in ("billing", "shipping", "nobody's"):
        theirs = Team.objects.filter(queues__contains=[queue]).values_list(*columns)
        assert sorted(by_queue.rows(queue)) == sorted(theirs)
    assert len(by_queue.rows("billing")) == 2 and by_queue.rows("nobody's") == []
    for user in (operator, people["admin"]):
        theirs = Team.objects.filter(members=user).values_list(*columns)
        assert sorted(by_member.rows(user.pk)) == sorted(theirs)
    assert {limit for _, _, limit in by_member.rows(operator.pk)} == {None, Decimal("1.50")}


@pytest.mark.django_db(transaction=True)
def test_the_claim_and_the_read_go_together_and_see_the_claim(people) -> None:
    """``lifecycle.claim_and_read`` outside a transaction (as a worker calls it): one
    execute carries the claim and the read, and the run read is the claimed one."""
    from agentweb.runs import lifecycle

    made = actions.do_create_run(user=people["operator"], task="Check order A1001")
    with CaptureQueriesContext(connection) as sent:
        ours = lifecycle.claim_and_read(made.pk, "test-worker:1")
    assert len(sent) == 1 and sent[0]["sql"].count("runs_run") >= 2
    theirs = Run.objects.select_related(*RELATED).get(pk=made.pk)
    assert ours is not None and _fields(ours) == _fields(theirs)
    assert (ours.status, ours.lease_owner, ours.attempts) == ("running", "test-worker:1", 1)
    assert ours.started_at is not None and ours.trace_id == theirs.trace_id
    for name in ("agent", "created_by"):
        assert _fields(getattr(ours, name)) == _fields(getattr(theirs, name))
    # Taken already (its lease is live): not claimed again, nothing changed.
    assert lifecycle.claim_and_read(made.pk, "test-worker:2") is None
    again = Run.objects.get(pk=made.pk)
    assert (again.lease_owner, again.attempts) == ("test-worker:1", 1)
    assert lifecycle.claim_and_read(987654321, "test-worker:3") is None
