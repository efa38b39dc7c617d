"""What runs tell others through hooks (``agentweb.runs.hooks``): a stored step, after its
commit, to the step hooks (observability is one); periodic clean-ups of tool modules."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from agentweb.runs import actions, hooks, store
from agentweb.runs.models import Run


@pytest.fixture
def registered() -> Iterator[None]:
    """The hooks registered by the test go away after it."""
    steps, wanted, jobs = list(hooks._step_hooks), set(hooks._wanted), dict(hooks._jobs)
    yield
    hooks._step_hooks[:] = steps
    hooks._wanted.clear()
    hooks._wanted.update(wanted)
    hooks._jobs.clear()
    hooks._jobs.update(jobs)


def test_a_step_hook_hears_of_a_stored_batch_after_commit_only(
    people: dict[str, Any], enqueued: list[int], registered: None
) -> None:
    heard: list[hooks.StoredStep] = []
    hooks.on_step_stored(heard.append, {"run_finished"})
    run = actions.do_create_run(user=people["operator"], task="Where is A1?")
    with transaction.atomic():
        locked = Run.objects.select_related("agent").select_for_update().get(pk=run.pk)
        store.append_events(locked, [{"type": "run_started", "data": {}}])  # not asked for
        store.append_events(
            locked,
            [{"type": "model_called", "data": {"n": 1}}, {"type": "run_finished", "data": {}}],
            step_ended_ns=1234,
        )
        assert heard == []  # not before the commit
    assert len(heard) == 1
    step = heard[0]
    assert step.events == [("model_called", {"n": 1}), ("run_finished", {})]
    assert (step.run_id, step.agent(), step.trace_id) == (run.pk, "ticket-assistant", run.trace_id)
    assert step.stored_ns == 1234 and step.final_status == "succeeded"
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        store.append_events(locked, [{"type": "run_finished", "data": {}}])
        transaction.set_rollback(True)
    assert len(heard) == 1  # a rolled-back batch is never told


def test_facts_the_batch_does_not_carry_are_read_when_asked(
    people: dict[str, Any], enqueued: list[int], registered: None
) -> None:
    heard: list[hooks.StoredStep] = []
    hooks.on_step_stored(heard.append, {"run_started"})
    run = actions.do_create_run(user=people["operator"], task="Where is A1?")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)  # its agent not read
        store.append_events(locked, [{"type": "run_started", "data": {}}])
    assert heard[0].agent_name is None
    assert heard[0].agent() == "ticket-assistant"


def test_a_failing_step_hook_breaks_nothing(
    people: dict[str, Any], enqueued: list[int], registered: None, caplog: Any
) -> None:
    heard: list[int] = []

    def broken(step: hooks.StoredStep) -> None:
        raise RuntimeError("exporter down")

    hooks.on_step_stored(broken, {"run_started"})
    hooks.on_step_stored(lambda step: heard.append(step.run_id), {"run_started"})
    run = actions.do_create_run(user=people["operator"], task="Where is A1?")
    with caplog.at_level(logging.WARNING, "agentweb.runs.hooks"), transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        store.append_events(locked, [{"type": "run_started", "data": {}}])
    assert heard == [run.pk]
    assert "a step hook" in caplog.text and "exporter down" in caplog.text


def test_housekeeping_runs_every_job_and_survives_a_failing_one(
    registered: None, caplog: Any
) -> None:
    def broken() -> int:
        raise OSError("disk gone")

    hooks.on_housekeeping("broken", broken)
    hooks.on_housekeeping("tidy", lambda: 3)
    with caplog.at_level(logging.WARNING, "agentweb.runs.hooks"):
        done = hooks.housekeeping()
    assert done["tidy"] == 3 and "broken" not in done
    assert "housekeeping broken failed" in caplog.text
