"""The host reads and writes the runtime's typed events: a stored row reads back as its
class (``RunEvent.as_event()``), and what the engine stores of a step is each event's
own ``to_json()`` (a model call's with its cost added last), key for key and in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentweb.runs import actions, engine, store
from agentweb.runs.models import Approval, Run, RunEvent
from agentweb.runtime import events as ev
from agentweb.runtime.testing import call

SAMPLES = Path(__file__).resolve().parents[1] / "runtime" / "event_samples.jsonl"


def _samples() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]


def test_every_sample_stored_reads_back_as_its_class(people) -> None:
    run = actions.do_create_run(user=people["operator"], task="samples")
    samples = _samples()
    assert {s["type"] for s in samples} == ev.EVENT_TYPES  # every type, the host's too
    for seq, sample in enumerate(samples, start=100):
        RunEvent.objects.create(run=run, seq=seq, type=sample["type"], data=sample["data"])
    rows = RunEvent.objects.filter(run=run, seq__gte=100).order_by("seq")
    for row, sample in zip(rows, samples, strict=True):
        event = row.as_event()
        assert type(event) is ev.CLASSES[sample["type"]]
        assert event.to_json() == sample


def test_a_row_that_does_not_fit_its_type_is_refused(people) -> None:
    run = actions.do_create_run(user=people["operator"], task="misfit")
    row = RunEvent(run=run, seq=99, type="tool_call_finished", data={"call_id": "c1"})
    with pytest.raises(ev.EventShapeError, match="missing 'ok'"):
        row.as_event()


def test_what_a_step_stores_is_each_events_own_json_with_the_cost_last(
    people, scripted, enqueued, monkeypatch
) -> None:
    stored: list[dict[str, Any]] = []
    append = store.append_events

    def keep(run: Run, events: Any, **kw: Any) -> Any:
        events = list(events)
        stored.extend(json.loads(json.dumps(e)) for e in events)  # as the column gets it
        return append(run, events, **kw)

    monkeypatch.setattr(store, "append_events", keep)
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "Paid back 30.")
    run = actions.do_create_run(user=people["operator"], task="Order A1 never arrived")
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(
        approval_id=approval.pk, user=people["approver"], decision="approve", comment="ok"
    )
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    kinds = [e["type"] for e in stored]
    assert kinds.count("model_called") == 2 and "approval_requested" in kinds
    for event in stored:
        typed = ev.parse(event["type"], event["data"])
        # the same keys in the same order as the class makes them: nothing added or moved
        assert json.dumps(typed.to_json()) == json.dumps(event)
        if isinstance(typed, ev.ModelCalled):
            assert list(event["data"])[-1] == "cost_usd"
    rows = RunEvent.objects.filter(run=run).order_by("seq")
    assert [r.as_event().to_json() for r in rows] == [
        {"type": r.type, "data": r.data} for r in rows
    ]
    run.refresh_from_db()
    assert run.usage["model_calls"] == 2
