"""The run a worker reads as it takes a run up (``runs.loading``): the same objects the
ORM's ``select_related(...).get(pk=...)`` gives, from SQL compiled once."""

from __future__ import annotations

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
