"""Totals under concurrency: runs that decide by a sum_per rule at the same time must not
each count the other as zero (two tickets about one order, or runs without a ticket).

The interleaving is forced, not hoped for: in the threaded test both runs read their
totals before either records its call (a barrier in the first ``prior_total`` of each
thread); in the others one run's reply is stored and the run stops there (the fault
hook) while another run pays out, then the first one carries on.
"""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from agentweb.runs import actions, engine, faults, policies
from agentweb.runs.journal import DbJournal
from agentweb.runs.models import AgentProfile, Approval, Run, RunEvent, ToolExecution
from agentweb.runtime.journal import Admission, Declined
from agentweb.runtime.testing import call
from tests.runs import sample_tools
from tests.runs.test_exactly_once import Crashes, Died, after_results, take_over

RULE = {"argument": "amount", "at_least": 20, "sum_per": "order_id"}


@pytest.fixture
def summed(people: dict[str, Any]) -> AgentProfile:
    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.approval_policies = {"pay_out": RULE}
    profile.save()
    return profile


@pytest.fixture
def crash_at(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Crashes:
    crashes = Crashes(settings)
    monkeypatch.setattr(faults.os, "_exit", crashes.die)
    return crashes


def start(people: dict[str, Any]) -> Run:
    return actions.do_create_run(user=people["operator"], task="Refund order A1")


def paid_without_a_person() -> Decimal:
    """What went out on order A1 with no person's approval."""
    by_person = set(Approval.objects.filter(status="approved").values_list("run_id", "call_id"))
    return sum(
        (
            Decimal(str(e.arguments["amount"]))
            for e in ToolExecution.objects.filter(tool="pay_out", status="succeeded")
            if (e.run_id, e.call_id) not in by_person
        ),
        Decimal(0),
    )


def reads_first_then_meets(monkeypatch: pytest.MonkeyPatch, parties: int) -> threading.Barrier:
    """Each thread's first total (the one its plan is made on) waits for the others' first
    total, so every run has read before any run records its call."""
    barrier = threading.Barrier(parties, timeout=20)
    real = policies.prior_total
    local = threading.local()

    def prior_total(*args: Any) -> float:
        total = real(*args)
        if not getattr(local, "met", False):
            local.met = True
            barrier.wait()
        return total

    monkeypatch.setattr(policies, "prior_total", prior_total)
    return barrier


@pytest.mark.parametrize("other_order", ["A1", " a1 "])
def test_it_lets_one_of_two_runs_deciding_at_once_pass(
    people, scripted, enqueued, summed, monkeypatch, other_order
) -> None:
    scripted.enqueue(
        after_results(lambda: call("pay_out", order_id="A1", amount=15)),
        after_results(lambda: call("pay_out", order_id=other_order, amount=15)),
        *[after_results(lambda: "Done.")] * 2,
    )
    runs = [start(people), start(people)]
    reads_first_then_meets(monkeypatch, len(runs))
    statuses: dict[int, str | None] = {}
    errors: list[BaseException] = []

    def work(run: Run) -> None:
        try:
            statuses[run.pk] = engine.execute_run(run.pk)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(run,)) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert sorted(statuses.values()) == [Run.Status.SUCCEEDED, Run.Status.WAITING_APPROVAL]
    assert sum(sample_tools.SIDE_EFFECTS.values()) == 1  # one payment
    assert paid_without_a_person() < 20
    [waiting] = [r for r in runs if statuses[r.pk] == Run.Status.WAITING_APPROVAL]
    [asked] = Approval.objects.filter(run=waiting, status="pending")
    assert asked.tool == "pay_out" and asked.arguments["amount"] == 15
    requested = RunEvent.objects.get(run=waiting, type="approval_requested").data
    where = asked.arguments["order_id"]
    assert requested["why"] == f"amount on order_id {where} reaches 20 (total 30.00)"
    assert not RunEvent.objects.filter(run=waiting, type="tool_call_started").exists()


def test_a_call_planned_below_the_limit_asks_a_person_when_another_run_paid_meanwhile(
    people, scripted, enqueued, summed, crash_at
) -> None:
    # the first run's reply (15, then 3 on the same order) is stored, then its worker stops
    scripted.enqueue(
        after_results(
            lambda: [
                call("pay_out", order_id="A1", amount=15),
                call("pay_out", order_id="A1", amount=3),
            ]
        ),
        after_results(lambda: call("pay_out", order_id="A1", amount=10)),
        *[after_results(lambda: "Done.")] * 2,
    )
    crash_at("reply_stored:pay_out")
    first = start(people)
    with pytest.raises(Died):
        engine.execute_run(first.pk)
    stored = Run.objects.get(pk=first.pk).state
    assert [c["state"] for c in stored["turn"]] == ["queued", "queued"]  # both by policy
    second = start(people)  # meanwhile another run pays 10 on A1
    assert engine.execute_run(second.pk) == Run.Status.SUCCEEDED
    take_over(first)
    assert engine.execute_run(first.pk) == Run.Status.WAITING_APPROVAL
    assert sample_tools.SIDE_EFFECTS["A1"] == 1  # the 10 only
    # 10 + 15 reaches 20; the 3 after it counts the 15 that now waits for a person
    asked = Approval.objects.filter(run=first, status="pending").order_by("pk")
    assert [a.arguments["amount"] for a in asked] == [15, 3]
    why = [
        e.data["why"]
        for e in RunEvent.objects.filter(run=first, type="approval_requested").order_by("seq")
    ]
    assert why == [
        "amount on order_id A1 reaches 20 (total 25.00)",
        "amount on order_id A1 reaches 20 (total 28.00)",
    ]
    assert paid_without_a_person() == 10


def test_two_calls_in_one_reply_count_each_other(people, scripted, enqueued, summed) -> None:
    scripted.enqueue(
        [call("pay_out", order_id="A1", amount=15), call("pay_out", order_id="a1", amount=15)],
        "Asked.",
    )
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert sample_tools.SIDE_EFFECTS["A1"] == 1 and sample_tools.SIDE_EFFECTS["a1"] == 0
    [asked] = Approval.objects.filter(run=run, status="pending")
    assert asked.arguments == {"order_id": "a1", "amount": 15}
    assert paid_without_a_person() == 15


def test_a_person_approved_call_is_not_sent_back_by_the_total(
    people, scripted, enqueued, summed
) -> None:
    scripted.enqueue(
        after_results(lambda: call("pay_out", order_id="A1", amount=25)),
        after_results(lambda: "Done."),
    )
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    [asked] = Approval.objects.filter(run=run, status="pending")
    actions.do_decide_approval(approval_id=asked.pk, user=people["approver"], decision="approve")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED  # 25 reaches 20: a person said so
    assert sample_tools.SIDE_EFFECTS["A1"] == 1


def waiting_for_advisory_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
            " WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()"
        )
        return int(cursor.fetchone()[0])


def test_the_journal_admits_calls_on_one_total_one_at_a_time(people, enqueued, summed) -> None:
    """The lock is held from the re-count until the row is committed: a second run's
    re-count waits for the first run's row, and counts it."""
    runs = [start(people), start(people)]
    inside, release = threading.Event(), threading.Event()
    counted: dict[str, float] = {}
    results: dict[str, Any] = {}

    def admission(name: str) -> Admission:
        def check() -> str | None:
            counted[name] = policies.prior_total("pay_out", "amount", "order_id", "A1")
            if name == "first":
                inside.set()
                release.wait(20)
            return None if counted[name] + 15 < 20 else "reaches 20"

        return Admission(keys=(json.dumps(["pay_out", "a1"]),), check=check)

    def begin(run: Run, name: str) -> None:
        try:
            arguments = {"order_id": "A1", "amount": 15}
            results[name] = DbJournal(run).begin(
                f"call-{name}", "pay_out", arguments, admission=admission(name)
            )
        finally:
            connection.close()

    first = threading.Thread(target=begin, args=(runs[0], "first"))
    first.start()
    assert inside.wait(20)
    second = threading.Thread(target=begin, args=(runs[1], "second"))
    second.start()
    for _ in range(400):  # until the second one queues on the first one's lock
        if waiting_for_advisory_locks():
            break
        time.sleep(0.05)
    assert waiting_for_advisory_locks() == 1
    assert "second" not in counted  # it has not counted yet
    release.set()
    first.join(20)
    second.join(20)
    assert results == {"first": None, "second": Declined("reaches 20")}
    assert counted == {"first": 0, "second": 15}
    assert ToolExecution.objects.filter(tool="pay_out").count() == 1
