"""Side effects exactly once, in-process: the worker "dies" at every point between the
model's reply and the stored step (the fault hook raises instead of exiting), another
attempt takes the run over, and each intended write happens once.

The same points with real worker processes and ``os._exit`` are in test_e2e_crash.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agentweb.runs import actions, engine, faults, waiting
from agentweb.runs.models import Approval, Run, RunEvent, ToolExecution
from agentweb.runtime.messages import Message, ToolMessage
from agentweb.runtime.testing import ScriptedModel, call
from tests.runs import sample_tools


class Died(BaseException):
    """What os._exit would have done: nothing after it runs, open transactions roll back."""


class Crashes:
    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.fired: list[str] = []

    def __call__(self, point: str) -> None:
        self.settings.AGENTWEB_TEST_CRASH_AT = point

    def die(self, code: int) -> None:
        self.fired.append(self.settings.AGENTWEB_TEST_CRASH_AT)
        self.settings.AGENTWEB_TEST_CRASH_AT = ""  # the next worker is a healthy one
        raise Died(code)


@pytest.fixture
def crash_at(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Crashes:
    crashes = Crashes(settings)
    monkeypatch.setattr(faults.os, "_exit", crashes.die)
    return crashes


def after_results(first: Any) -> Any:
    """A model that answers from the conversation: the call first, the answer after its
    result. Asked again after a crash, it sends the same call under a new id."""

    def reply(messages: Sequence[Message], tools: Any) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return first()
        return "Done."

    return reply


def take_over(run: Run) -> None:
    """The dead worker's lease runs out; the beat job hands the run to another. (The
    owner is renamed too: in this process the dead attempt's lease keeper lives on.)"""
    Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING).update(
        lease_owner="dead:0", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def drive(run: Run, people: dict[str, Any]) -> str | None:
    """Attempts until the run ends; a person approves whatever waits for one (a risky
    call, or a call whose outcome a crash left unknown: the person checked, it is safe)."""
    for _ in range(8):
        try:
            engine.execute_run(run.pk)
        except Died:
            take_over(run)
        for approval in Approval.objects.filter(run=run, status="pending"):
            actions.do_decide_approval(
                approval_id=approval.pk, user=people["approver"], decision="approve"
            )
        status = Run.objects.get(pk=run.pk).status
        if status in Run.FINAL:
            return status
    return status


def model_asks(model: ScriptedModel) -> int:
    return len(model.requests)


@pytest.mark.parametrize("point", faults.POINTS)
def test_a_no_approval_write_happens_once_whenever_the_worker_dies(
    people, scripted, enqueued, crash_at, point
) -> None:
    scripted.enqueue(*[after_results(lambda: call("note", customer_id="C1", text="hi"))] * 3)
    crash_at(f"{point}:note")
    run = actions.do_create_run(user=people["operator"], task="Note it")
    assert drive(run, people) == Run.Status.SUCCEEDED
    assert crash_at.fired == [f"{point}:note"]  # the worker did die there
    assert len(sample_tools.NOTES) == 1  # one note in the notes system
    done = ToolExecution.objects.filter(run=run, tool="note")
    assert [e.status for e in done] == ["succeeded"]
    if point != "reply_received":  # the stored reply is re-used: the model is not re-asked
        assert model_asks(scripted) == 2
    if point in ("tool_begun", "tool_returned"):  # may or may not have happened: a person
        asked = Approval.objects.get(run=run)
        assert asked.reason == "unknown_outcome" and asked.status == "approved"
    else:
        assert sample_tools.SIDE_EFFECTS["note:C1"] == 1
        assert not Approval.objects.filter(run=run).exists()


@pytest.mark.parametrize("point", faults.POINTS)
def test_an_approved_write_happens_once_whenever_the_worker_dies(
    people, scripted, enqueued, crash_at, point
) -> None:
    scripted.enqueue(*[after_results(lambda: call("pay_out", order_id="A1", amount=30))] * 3)
    crash_at(f"{point}:pay_out")
    run = actions.do_create_run(user=people["operator"], task="Pay it back")
    assert drive(run, people) == Run.Status.SUCCEEDED
    assert crash_at.fired == [f"{point}:pay_out"]
    assert len(set(sample_tools.KEYS)) == 1  # one payment under one idempotency key
    assert [e.status for e in ToolExecution.objects.filter(run=run, tool="pay_out")] == [
        "succeeded"
    ]
    if point != "reply_received":
        assert model_asks(scripted) == 2
    if point not in ("tool_begun", "tool_returned"):
        assert sample_tools.SIDE_EFFECTS["A1"] == 1


def test_a_recovered_step_reuses_the_stored_reply_and_its_call_ids(
    people, scripted, enqueued, crash_at
) -> None:
    scripted.enqueue(call("note", customer_id="C1", text="hi"), "Done.")
    crash_at("reply_stored")
    run = actions.do_create_run(user=people["operator"], task="Note it")
    with pytest.raises(Died):
        engine.execute_run(run.pk)
    stored = Run.objects.get(pk=run.pk).state
    assert stored is not None and [c["state"] for c in stored["turn"]] == ["queued"]
    call_id = stored["turn"][0]["call_id"]
    assert not ToolExecution.objects.filter(run=run).exists()  # nothing ran yet
    take_over(run)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert ToolExecution.objects.get(run=run).call_id == call_id
    assert model_asks(scripted) == 2  # the reply was never asked for again
    called = RunEvent.objects.filter(run=run, type="model_called")
    assert [len(e.data["tool_calls"]) for e in called] == [1, 0]


def test_reply_step_and_tool_step_are_stored_separately(people, scripted, enqueued) -> None:
    """The reply with its call ids is committed in a step of its own before the tools run:
    its events have lower seqs and the state after it holds the planned calls."""
    scripted.enqueue(call("note", customer_id="C1", text="hi"), "Done.")
    run = actions.do_create_run(user=people["operator"], task="Note it")
    seen: list[tuple[list[str], Any]] = []
    real = engine._persist

    def spy(
        run_: Run, owner: str, state: Any, events: Any, outcome: Any, journal: Any, **kw: Any
    ) -> str:
        events = list(events)
        seen.append(([e.type for e in events], state.turn and [c.state for c in state.turn]))
        return real(run_, owner, state, events, outcome, journal, **kw)

    engine._persist = spy  # type: ignore[assignment]
    try:
        assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    finally:
        engine._persist = real  # type: ignore[assignment]
    assert seen[0] == (["run_started", "model_called"], ["queued"])
    assert seen[1] == (["tool_call_started", "tool_call_finished"], None)
    assert seen[2][0] == ["model_called", "run_finished"]


@pytest.mark.parametrize("point", ["reply_received", "step_committing", "reply_stored"])
def test_a_quick_read_runs_with_its_reply_and_a_crash_costs_only_the_read_again(
    people, scripted, enqueued, crash_at, monkeypatch, point
) -> None:
    """A read-only tool whose last call was quick runs in its reply's step (Turns.reads_now):
    the reply, the call and its result are stored by one transaction. A worker that dies
    before that commits leaves nothing: the recovered run asks the model again and reads
    again (a read changes nothing); one that dies after it does neither again. Either way
    one execution record, contiguous seqs, the events of one reply and one read. (Every
    step is stored at once here; test_step_waiting has the same crashes with quick steps
    stored together.)"""
    monkeypatch.setattr(waiting, "STEP_WAIT_BELOW_MS", 0.0)
    monkeypatch.setattr(sample_tools.lookup, "read_only", True)
    monkeypatch.setattr(sample_tools.lookup, "_last_ms", 0.5)
    first = after_results(lambda: call("lookup", order_id="A1"))
    scripted.enqueue(first, first, first)
    crash_at(f"{point}:lookup")
    run = actions.do_create_run(user=people["operator"], task="Where is A1?")
    with pytest.raises(Died):
        engine.execute_run(run.pk)
    assert crash_at.fired == [f"{point}:lookup"]
    stored = RunEvent.objects.filter(run=run)
    if point == "reply_stored":  # the step committed: reply, call and result together
        assert [e.type for e in stored.order_by("seq")] == [
            "run_started",
            "model_called",
            "tool_call_started",
            "tool_call_finished",
        ]
    else:
        assert not stored.exists() and not ToolExecution.objects.filter(run=run).exists()
    take_over(run)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types == [
        "run_started",
        "model_called",
        "tool_call_started",
        "tool_call_finished",
        "model_called",
        "run_finished",
    ]
    assert list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == [
        1, 2, 3, 4, 5, 6,
    ]  # fmt: skip
    assert ToolExecution.objects.filter(run=run).count() == 1
    assert model_asks(scripted) == (2 if point == "reply_stored" else 3)
