"""Quick steps wait for the next one and are stored with it (runs.waiting).

A step whose calls were all quick reads and whose model answered within
``STEP_WAIT_BELOW_MS`` is not stored on its own: the next stored step writes it first, in
the same transaction. What each test reads back is PostgreSQL's: the transactions that
wrote a run's events are their rows' ``xmin`` (``people`` makes these tests commit for
real), and a worker that dies is the fault hook raising where ``os._exit`` would be.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
from django.db import connection

from agentweb.budgets.models import DailySpend
from agentweb.runs import actions, engine, faults, leases, waiting
from agentweb.runs.models import AgentProfile, Run, RunEvent, ToolExecution
from agentweb.runtime.messages import Message, ToolMessage
from agentweb.runtime.testing import call
from tests.runs import sample_tools
from tests.runs.test_exactly_once import Crashes, Died, take_over

READS = ["A1", "A2", "A3", "A4", "A5", "A6"]


@pytest.fixture
def dies_at(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Crashes:
    """The worker dies at a fault point (test_exactly_once's ``crash_at``)."""
    crashes = Crashes(settings)
    monkeypatch.setattr(faults.os, "_exit", crashes.die)
    return crashes


@pytest.fixture
def quick_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """``lookup`` as a quick read: read-only, its last call quick (Turns.reads_now)."""
    monkeypatch.setattr(sample_tools.lookup, "read_only", True)
    monkeypatch.setattr(sample_tools.lookup, "_last_ms", 0.5)


def reads_then_answer(orders: list[str], pause: float = 0.0) -> Any:
    """A model that looks up ``orders`` one per reply, then answers; ``pause`` seconds
    before each reply (a slower model)."""

    def reply(messages: Sequence[Message], tools: Any) -> Any:
        time.sleep(pause)
        done = sum(1 for m in messages if isinstance(m, ToolMessage))
        if done < len(orders):
            return call("lookup", order_id=orders[done])
        return "Done."

    return reply


def transactions(run: Run) -> list[list[str]]:
    """The run's event types, grouped by the transaction that stored them, in order."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xmin::text, type FROM runs_runevent WHERE run_id = %s ORDER BY seq", [run.pk]
        )
        groups: list[list[str]] = []
        last = None
        for xmin, kind in cursor.fetchall():
            if xmin != last:
                groups.append([])
                last = xmin
            groups[-1].append(kind)
    return groups


def seqs(run: Run) -> list[int]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))


STEP = ["model_called", "tool_call_started", "tool_call_finished"]


def test_quick_read_steps_are_stored_with_the_answer_in_one_transaction(
    people, scripted, enqueued, quick_lookup
) -> None:
    scripted.enqueue(*[reads_then_answer(READS[:3])] * 4)
    run = actions.do_create_run(user=people["operator"], task="Where are A1 to A3?")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert transactions(run) == [["run_started", *STEP * 3, "model_called", "run_finished"]]
    assert seqs(run) == list(range(1, 13))
    run.refresh_from_db()
    assert run.last_seq == 12 and run.usage["model_calls"] == 4
    recorded = ToolExecution.objects.filter(run=run).values_list("arguments", flat=True)
    assert sorted(recorded, key=str) == [{"order_id": o} for o in READS[:3]]
    assert run.state is not None and run.state["status"] == "finished"
    # the budgets' ledger saw the four calls once each (one hook call for the transaction)
    spent = DailySpend.objects.get(kind="profile", ref=run.agent_id)
    assert (spent.model_calls, spent.tokens) == (
        4,
        run.usage["input_tokens"] + run.usage["output_tokens"],
    )


def test_a_slow_model_has_every_step_stored_at_once(
    people, scripted, enqueued, quick_lookup, monkeypatch
) -> None:
    monkeypatch.setattr(waiting, "STEP_WAIT_BELOW_MS", 20.0)
    scripted.enqueue(*[reads_then_answer(READS[:2], pause=0.03)] * 3)  # 30 ms per reply
    run = actions.do_create_run(user=people["operator"], task="Where are A1 and A2?")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert transactions(run) == [["run_started", *STEP], STEP, ["model_called", "run_finished"]]


def test_no_more_than_the_cap_of_steps_wait(people, scripted, enqueued, quick_lookup) -> None:
    """Six quick steps: four wait, the fifth is stored with them, the sixth waits for the
    answer (STEP_WAIT_MAX_STEPS = 4)."""
    assert waiting.STEP_WAIT_MAX_STEPS == 4
    scripted.enqueue(*[reads_then_answer(READS)] * 7)
    run = actions.do_create_run(user=people["operator"], task="Where are A1 to A6?")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert transactions(run) == [
        ["run_started", *STEP * 5],
        [*STEP, "model_called", "run_finished"],
    ]
    assert seqs(run) == list(range(1, 22))


def test_steps_wait_no_longer_than_the_time_cap(
    people, scripted, enqueued, quick_lookup, monkeypatch
) -> None:
    """With a time cap shorter than one reply, a step that waits is stored with the next
    one, never two steps later."""
    monkeypatch.setattr(waiting, "STEP_WAIT_MAX_MS", 5.0)
    scripted.enqueue(*[reads_then_answer(READS[:4], pause=0.01)] * 5)
    run = actions.do_create_run(user=people["operator"], task="Where are A1 to A4?")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert transactions(run) == [
        ["run_started", *STEP * 2],
        STEP * 2,
        ["model_called", "run_finished"],
    ]


def test_a_budget_has_every_step_stored_at_once(people, scripted, enqueued, quick_lookup) -> None:
    """A run under a budget is checked before each model call against what its stored
    steps cost: none waits (at most one call past a limit, as budgets.check says)."""
    AgentProfile.objects.filter(name="ticket-assistant").update(
        budget={"max_tokens_per_run": 1_000_000}
    )
    scripted.enqueue(*[reads_then_answer(READS[:2])] * 3)
    run = actions.do_create_run(user=people["operator"], task="Where are A1 and A2?")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert transactions(run) == [["run_started", *STEP], STEP, ["model_called", "run_finished"]]


def test_a_write_is_planned_in_a_stored_step_after_the_reads_that_waited(
    people, scripted, enqueued, quick_lookup
) -> None:
    """A reply that asks for a write is stored, with the quick steps before it, before
    the write runs (its journal record then commits on its own)."""

    def reply(messages: Sequence[Message], tools: Any) -> Any:
        done = sum(1 for m in messages if isinstance(m, ToolMessage))
        if done == 0:
            return call("lookup", order_id="A1")
        if done == 1:
            return call("note", customer_id="C1", text="checked")
        return "Done."

    scripted.enqueue(*[reply] * 3)
    run = actions.do_create_run(user=people["operator"], task="Check A1 and note it")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    groups = transactions(run)
    assert groups[0] == ["run_started", *STEP, "model_called"]  # the note's reply: stored
    assert groups[1] == ["tool_call_started", "tool_call_finished"]  # then the note ran
    assert sample_tools.SIDE_EFFECTS["note:C1"] == 1


@pytest.mark.parametrize("point", ["reply_received", "step_committing", "reply_stored"])
def test_a_worker_that_dies_with_steps_waiting_costs_only_their_reads_again(
    people, scripted, enqueued, quick_lookup, dies_at, point
) -> None:
    """Dying before the steps that waited are stored leaves none of them: the run is
    taken over from the start, the model asked and the reads done again, each call with
    one record and the seqs contiguous. Dying after they were stored (with the answer)
    leaves a finished run."""
    scripted.enqueue(*[reads_then_answer(READS[:2])] * 6)
    dies_at(f"{point}:lookup")
    run = actions.do_create_run(user=people["operator"], task="Where are A1 and A2?")
    with pytest.raises(Died):
        engine.execute_run(run.pk)
    assert dies_at.fired == [f"{point}:lookup"]
    if point == "reply_stored":  # after the commit that stored both reads and the answer
        assert Run.objects.get(pk=run.pk).status == Run.Status.SUCCEEDED
        assert len(scripted.requests) == 3
    else:
        assert not RunEvent.objects.filter(run=run).exists()
        assert not ToolExecution.objects.filter(run=run).exists()
        take_over(run)
        assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
        # the first attempt asked once (died at its first reply) or three times
        assert len(scripted.requests) == (1 if point == "reply_received" else 3) + 3
    assert transactions(run) == [["run_started", *STEP * 2, "model_called", "run_finished"]]
    assert seqs(run) == list(range(1, 10))
    assert ToolExecution.objects.filter(run=run).count() == 2


def test_a_cancel_stores_the_steps_that_waited_with_the_cancellation(
    people, scripted, enqueued, quick_lookup
) -> None:
    """Two quick steps wait; during the third model call a person cancels (the lease
    keeper sees it within its poll): the reply that came in, the steps that waited and
    the cancellation are stored by one transaction, and the run ends cancelled."""
    run_ids: list[int] = []

    def reply(messages: Sequence[Message], tools: Any) -> Any:
        done = sum(1 for m in messages if isinstance(m, ToolMessage))
        if done < 2:
            return call("lookup", order_id=READS[done])
        actions.do_request_cancel(Run.objects.get(pk=run_ids[0]), people["operator"])
        time.sleep(leases.CANCEL_POLL_SECONDS + 0.3)  # the keeper's poll notices it
        return "Done."

    scripted.enqueue(*[reply] * 3)
    run = actions.do_create_run(user=people["operator"], task="Where are A1 and A2?")
    run_ids.append(run.pk)
    assert engine.execute_run(run.pk) == Run.Status.CANCELLED
    assert transactions(run) == [["run_started", *STEP * 2, "model_called", "run_cancelled"]]
    assert seqs(run) == list(range(1, 10))
    assert ToolExecution.objects.filter(run=run).count() == 2
    spent = DailySpend.objects.get(kind="profile", ref=run.agent_id)
    assert spent.model_calls == 3
