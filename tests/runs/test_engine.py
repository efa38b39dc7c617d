"""The run lifecycle in-process: claim, steps stored with seqs, pause, decide, resume."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agentweb.runs import actions, engine, leases, lifecycle, store
from agentweb.runs.models import Approval, AuditEntry, Run, RunEvent, ToolExecution
from agentweb.runtime.events import misfit
from agentweb.runtime.messages import ToolMessage
from agentweb.runtime.testing import call
from tests.conftest import wait_for
from tests.runs import sample_tools


def start(people: dict[str, Any], task: str = "Order A1 never arrived") -> Run:
    return actions.do_create_run(user=people["operator"], task=task)


def types(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def misfits(run: Run) -> dict[int, list[str]]:
    """Stored events whose data does not fit their type's shape (runtime.events)."""
    found = {e.seq: misfit(e.type, e.data) for e in RunEvent.objects.filter(run=run)}
    return {seq: problems for seq, problems in found.items() if problems}


def seqs(run: Run) -> list[int]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))


def approval_call(run: Run) -> str:
    return str(Approval.objects.get(run=run).call_id)


def test_it_runs_to_the_end_storing_every_step(people, scripted, enqueued) -> None:
    scripted.enqueue(call("lookup", order_id="A1"), "Order A1 was delivered.")
    run = start(people)
    assert enqueued == [run.pk]
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.final_answer == "Order A1 was delivered."
    assert run.decided_by == "validator"  # the shop validator checked the answer
    assert types(run) == [
        "run_started",
        "model_called",
        "tool_call_started",
        "tool_call_finished",
        "model_called",
        "run_finished",
    ]
    assert seqs(run) == list(range(1, 7))
    assert run.last_seq == 6
    assert run.usage["model_calls"] == 2
    assert ToolExecution.objects.get(run=run).status == "succeeded"
    scripted.assert_complete()


def test_the_runs_thread_gives_its_pooled_connection_back_while_tools_run(
    people, scripted, enqueued, monkeypatch
) -> None:
    """With the pool (DB_POOL_SIZE) a run's thread holds none of the process's few
    connections while it waits on its tool calls (they may need them); without a pool it
    keeps its own, as before."""
    from django.db import connections

    from agentweb import dbpool
    from agentweb.runtime import execution

    runs_connection = connections["default"]  # this thread's: execute_run runs here
    held: list[bool] = []
    invoke = execution._invoke

    def watched(inv: Any) -> Any:
        held.append(runs_connection.connection is not None)
        return invoke(inv)

    monkeypatch.setattr(execution, "_invoke", watched)
    scripted.enqueue(call("lookup", order_id="A1"), "Order A1 was delivered.")
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert held == [not dbpool.pooled()]


@pytest.mark.parametrize("sync_steps", [False, True])
def test_only_a_runs_end_waits_for_the_disk_flush_unless_every_step_must(
    people, scripted, enqueued, monkeypatch, settings, sync_steps
) -> None:
    """A step in the middle of a run is sent as a transaction of its own that begins by
    not waiting for the flush (``SET LOCAL synchronous_commit = off``); with
    AGENTWEB_SYNC_STEPS, and at the run's end, the step's COMMIT waits for it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agentweb.runs.batch import Batch

    settings.AGENTWEB_SYNC_STEPS = sync_steps
    seen: list[str] = []
    point = engine.crash_point
    send_alone = Batch.send_as_transaction

    def watched(name: str, tools: Any) -> None:
        if name == "step_committing" and connection.in_atomic_block:
            raw = connection.connection
            if raw is not None and raw.info.transaction_status.name == "INTRANS":
                # the step's writes are sent; its COMMIT is next
                with connection.cursor() as cursor:
                    cursor.execute("SHOW synchronous_commit")
                    seen.append(cursor.fetchone()[0])
            else:
                seen.append("nothing sent yet")
        point(name, tools)

    def spied(batch: Batch) -> bool:
        alone = send_alone(batch)
        seen.append("sent alone" if alone else "sent in a transaction")
        return alone

    monkeypatch.setattr(engine, "crash_point", watched)
    monkeypatch.setattr(Batch, "send_as_transaction", spied)
    scripted.enqueue(call("lookup", order_id="A1"), "Order A1 was delivered.")
    with CaptureQueriesContext(connection) as captured:
        assert engine.execute_run(start(people).pk) == Run.Status.SUCCEEDED
    steps = [q["sql"] for q in captured.captured_queries if "INSERT INTO runs_runevent" in q["sql"]]
    # the reply with its planned call, the tool's result, the answer (the run's end)
    if sync_steps:
        assert seen == ["on", "on", "on"]
        assert not any(sql.startswith("SET LOCAL synchronous_commit") for sql in steps)
    else:
        middle = ["nothing sent yet", "sent alone"]
        assert seen == [*middle, *middle, "on"]
        assert [sql.startswith("SET LOCAL synchronous_commit = off; ") for sql in steps] == [
            True,
            True,
            False,
        ]
    assert seqs(Run.objects.latest("pk")) == list(range(1, 7))


def test_a_steps_writes_reach_postgresql_in_one_statement(people, scripted, enqueued) -> None:
    """A step's tool executions, events, the spend of its model call and the run's row go
    in one execute (one round trip) after the row lock; a step that leaves the run running
    does not write the indexed lease column (the keeper renews it), so PostgreSQL may
    update the row in place."""
    from django.test.utils import CaptureQueriesContext

    scripted.enqueue(call("lookup", order_id="A1"), "Order A1 was delivered.")
    run = start(people)
    with CaptureQueriesContext(connection) as captured:
        assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    sent = [q["sql"] for q in captured.captured_queries]
    writes = [sql for sql in sent if "INSERT INTO runs_runevent" in sql]
    assert len(writes) == 3  # the reply, the tool's step, the answer
    assert all('UPDATE "runs_run" SET' in sql for sql in writes)
    reply, tool_step, answer = writes
    assert 'INSERT INTO "runs_toolexecution"' in tool_step  # the read's record joins it
    for sql in (reply, tool_step):
        assert "lease_expires_at" not in sql.split('UPDATE "runs_run" SET')[1]
    assert "lease_expires_at" in answer.split('UPDATE "runs_run" SET')[1]  # released
    # a model call's spend joins its step's writes (budgets' ledger, an on_events_stored hook)
    assert all("INSERT INTO budgets_dailyspend" in sql for sql in (reply, answer))
    assert "budgets_dailyspend" not in tool_step
    assert not [sql for sql in sent if sql.startswith("INSERT INTO budgets_dailyspend")]
    assert types(run)[-1] == "run_finished" and seqs(run) == list(range(1, 7))
    execution = ToolExecution.objects.get(run=run)
    assert execution.status == "succeeded" and execution.arguments == {"order_id": "A1"}


def test_a_run_that_could_not_delegate_does_not_look_for_children_at_its_end(
    people, scripted, enqueued
) -> None:
    """Children come only from delegate_task, which a profile without delegates does not
    offer; such a run's end asks nothing about children (a delegating run's end still
    cancels its active children: tests/runs/test_delegation.py)."""
    from django.test.utils import CaptureQueriesContext

    scripted.enqueue("Nothing to look up.")
    run = start(people)
    assert not run.agent.delegates
    with CaptureQueriesContext(connection) as captured:
        assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert not [q for q in captured.captured_queries if '"parent_id" =' in q["sql"]]


def test_the_run_lists_hear_of_each_status_once(people, scripted, enqueued, monkeypatch) -> None:
    """Followers of the run hear of every stored step; the run lists only of the status
    changes (claimed: running, then the end), not once more per step."""
    from agentweb.runs import publish

    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(publish, "send_now", lambda group, message: sent.append((group, message)))
    scripted.enqueue(call("lookup", order_id="A1"), "Order A1 was delivered.")
    run = start(people)
    sent.clear()
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    statuses = [m["status"] for group, m in sent if group == publish.RUNS_GROUP]
    assert statuses == ["running", "succeeded"]
    seqs = [m["seq"] for group, m in sent if m["type"] == "run.event"]
    assert seqs == [2, 4, 6]  # one wake-up per stored step, with its last seq


def test_it_does_not_run_a_run_twice(people, scripted, enqueued) -> None:
    scripted.enqueue("Done.")
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert engine.execute_run(run.pk) is None  # a repeated wake-up finds nothing to do
    assert types(run).count("run_finished") == 1


def test_a_risky_call_pauses_without_running(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30))
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    approval = Approval.objects.get(run=run)
    assert (approval.tool, approval.arguments, approval.status) == (
        "pay_out",
        {"order_id": "A1", "amount": 30},
        "pending",
    )
    assert approval.expires_at > timezone.now() + timedelta(hours=23)
    assert types(run)[-1] == "approval_requested"
    assert sample_tools.SIDE_EFFECTS["A1"] == 0
    assert not ToolExecution.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert run.lease_owner == ""


def test_approve_resumes_once_and_runs_the_call_once(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "Paid back 30.")
    run = start(people)
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(
        approval_id=approval.pk, user=people["approver"], decision="approve", comment="ok"
    )
    assert enqueued == [run.pk, run.pk]
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert sample_tools.SIDE_EFFECTS["A1"] == 1
    execution = ToolExecution.objects.get(run=run)
    assert [execution.call_id] == sample_tools.KEYS  # the idempotency key is the call id
    assert AuditEntry.objects.filter(action="approval_approved", run=run).count() == 1
    assert AuditEntry.objects.filter(action="high_risk_tool_executed", run=run).count() == 1
    executed = AuditEntry.objects.get(action="high_risk_tool_executed", run=run)
    assert executed.actor is None and executed.data == {
        "call_id": execution.call_id,
        "tool": "pay_out",
        "arguments": execution.arguments,
        "ok": True,
        "error": None,
        "requested_by": "operator",
    }
    assert "approval_decided" in types(run)
    run.refresh_from_db()
    assert seqs(run) == list(range(1, run.last_seq + 1))
    assert misfits(run) == {}


def test_a_run_resumes_with_its_last_approval_decided_and_its_seqs_hold_throughout(
    people, scripted, enqueued
) -> None:
    """Two risky calls in one reply: the first decision stores its event and leaves the
    run waiting (the resume's UPDATE asks for no approval pending); the second resumes it.
    The run's last_seq follows the stored events either way."""
    scripted.enqueue(
        [call("pay_out", order_id="A1", amount=30), call("pay_out", order_id="A2", amount=40)],
        "Paid back both.",
    )
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    first, second = Approval.objects.filter(run=run).order_by("pk")
    actions.do_decide_approval(approval_id=first.pk, user=people["approver"], decision="approve")
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING_APPROVAL
    assert enqueued == [run.pk]  # its start only
    assert seqs(run) == list(range(1, run.last_seq + 1)) and types(run)[-1] == "approval_decided"
    actions.do_decide_approval(
        approval_id=second.pk, user=people["approver"], decision="reject", comment="not A2"
    )
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert enqueued == [run.pk, run.pk]
    assert seqs(run) == list(range(1, run.last_seq + 1)) and types(run)[-1] == "approval_decided"
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert (sample_tools.SIDE_EFFECTS["A1"], sample_tools.SIDE_EFFECTS["A2"]) == (1, 0)


def test_checking_a_decision_changes_nothing_and_the_first_record_wins(
    people, scripted, enqueued
) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30))
    run = start(people)
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    with pytest.raises(actions.NotAllowed):  # four-eyes: the starter may not decide
        actions.check_decide_approval(
            approval_id=approval.pk, user=people["operator"], decision="approve"
        )
    with pytest.raises(actions.ReasonRequired):  # the model reads why: a reason is needed
        actions.check_decide_approval(
            approval_id=approval.pk, user=people["approver"], decision="reject", comment=" "
        )
    first = actions.check_decide_approval(
        approval_id=approval.pk, user=people["approver"], decision="reject", comment=" Too much "
    )
    second = actions.check_decide_approval(
        approval_id=approval.pk, user=people["admin"], decision="approve"
    )
    assert (first.decision, first.comment) == ("reject", "Too much")
    assert Approval.objects.get(pk=approval.pk).status == "pending"  # checks write nothing
    assert not AuditEntry.objects.filter(action__startswith="approval_", run=run).exclude(
        action="approval_requested"
    )
    actions.record_decision(first)
    with pytest.raises(actions.Conflict, match="already rejected"):
        actions.record_decision(second)
    assert enqueued == [run.pk, run.pk]  # one resume


def test_edited_arguments_are_what_runs(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=300), "Paid back 25.")
    run = start(people)
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(
        approval_id=approval.pk,
        user=people["approver"],
        decision="approve",
        arguments={"order_id": "A1", "amount": 25},
    )
    engine.execute_run(run.pk)
    finished = RunEvent.objects.get(run=run, type="tool_call_finished")
    assert finished.data["result"]["paid_out"] == 25


def test_an_invalid_edit_is_refused_and_nothing_runs(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30))
    run = start(people)
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    with pytest.raises(actions.InvalidArguments):
        actions.do_decide_approval(
            approval_id=approval.pk,
            user=people["approver"],
            decision="approve",
            arguments={"amount": "lots"},
        )
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert sample_tools.SIDE_EFFECTS["A1"] == 0
    assert enqueued == [run.pk]


def test_a_reject_reason_reaches_the_model(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "I will explain instead.")
    run = start(people)
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(
        approval_id=approval.pk,
        user=people["approver"],
        decision="reject",
        comment="Above policy: max 20 EUR",
    )
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    last_request = scripted.requests[-1].messages
    tool_results = [m for m in last_request if isinstance(m, ToolMessage)]
    assert "Above policy: max 20 EUR" in tool_results[-1].content
    assert sample_tools.SIDE_EFFECTS["A1"] == 0


def test_an_expired_approval_counts_as_rejected(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "Nobody approved in time.")
    run = start(people)
    engine.execute_run(run.pk)
    Approval.objects.filter(run=run).update(expires_at=timezone.now() - timedelta(seconds=1))
    approval = Approval.objects.get(run=run)
    with pytest.raises(actions.Conflict, match="expired"):
        actions.do_decide_approval(
            approval_id=approval.pk, user=people["approver"], decision="approve"
        )
    assert actions.do_expire_approvals() == 1
    assert Approval.objects.get(run=run).status == "expired"
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    tool_results = [m for m in scripted.requests[-1].messages if isinstance(m, ToolMessage)]
    assert "expired" in tool_results[-1].content
    assert sample_tools.SIDE_EFFECTS["A1"] == 0
    decided = RunEvent.objects.get(run=run, type="approval_decided").data
    assert (decided["decision"], decided["by"], decided["edited"]) == ("expired", None, False)
    assert misfits(run) == {}


def test_a_recorded_execution_is_never_repeated(people, scripted, enqueued) -> None:
    """A worker that dies after the tool ran but before the step was stored: on recovery
    the journal's result is reused instead of paying out twice."""
    scripted.enqueue(call("pay_out", order_id="A1", amount=10), "Paid.")
    run = start(people)
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    saved_state = Run.objects.get(pk=run.pk).state
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert sample_tools.SIDE_EFFECTS["A1"] == 1
    # Rewind the run to the stored state before the execution, as a crash would leave it.
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.QUEUED, state=saved_state, final_answer=""
    )
    scripted.enqueue("Paid.")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert sample_tools.SIDE_EFFECTS["A1"] == 1


def test_a_crash_mid_call_goes_to_a_person(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=10))
    run = start(people)
    engine.execute_run(run.pk)
    approval = Approval.objects.get(run=run)
    actions.do_decide_approval(approval_id=approval.pk, user=people["approver"], decision="approve")
    # The worker recorded the start and died before the tool returned.
    ToolExecution.objects.create(
        run=run, call_id=approval.call_id, tool="pay_out", arguments=approval.arguments
    )
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert sample_tools.SIDE_EFFECTS["A1"] == 0
    assert ToolExecution.objects.get(run=run).status == "unknown"
    assert Approval.objects.filter(run=run, status="pending").count() == 1

    # A person checks the payment system, finds nothing paid, and approves one new try.
    scripted.enqueue("Paid out after the check.")
    pending = Approval.objects.get(run=run, status="pending")
    assert pending.reason == "unknown_outcome"
    actions.do_decide_approval(approval_id=pending.pk, user=people["admin"], decision="approve")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert sample_tools.SIDE_EFFECTS["A1"] == 1
    assert ToolExecution.objects.get(run=run).status == "succeeded"
    assert AuditEntry.objects.filter(action="unknown_execution_cleared", run=run).count() == 1


def test_cancel_stops_a_waiting_run_and_closes_its_approvals(people, scripted, enqueued) -> None:
    scripted.enqueue(call("pay_out", order_id="A1", amount=30))
    run = start(people)
    engine.execute_run(run.pk)
    actions.do_request_cancel(run, people["operator"])
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert Approval.objects.get(run=run).status == "cancelled"  # not "expired"
    assert run.actions() == [
        {
            "tool": "pay_out",
            "call_id": approval_call(run),
            "status": "cancelled",
            "approved_by": None,
        }
    ]
    assert types(run)[-1] == "run_cancelled"
    assert misfits(run) == {}
    with pytest.raises(actions.Conflict):
        actions.do_request_cancel(run, people["operator"])


def test_the_cancel_action_itself_refuses_who_may_not(people, enqueued) -> None:
    """may_cancel is enforced inside do_request_cancel, whoever calls it."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    run = start(people)
    nobody = get_user_model().objects.create_user("nobody", password="pw-123456789")
    with pytest.raises(actions.NotAllowed, match="you may not cancel this run"):
        actions.do_request_cancel(run, nobody)
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED
    assert not AuditEntry.objects.filter(action="run_cancel_requested", run=run).exists()
    group = Group.objects.get(name="operator")
    group.permissions.remove(Permission.objects.get(codename="cancel_run"))
    starter = get_user_model().objects.get(pk=people["operator"].pk)  # permissions afresh
    assert actions.may_cancel(starter, run) == (True, "")  # the starter still may
    assert actions.may_cancel(nobody, run) == (False, "you may not cancel this run")
    actions.do_request_cancel(run, starter)
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED


def test_cancel_of_a_running_run_stops_at_the_next_step(people, scripted, enqueued) -> None:
    run = start(people)

    def reply(messages: Any, tools: Any) -> Any:
        actions.do_request_cancel(Run.objects.get(pk=run.pk), people["operator"])
        return call("lookup", order_id="A1")

    scripted.enqueue(reply, "never asked")
    assert engine.execute_run(run.pk) == Run.Status.CANCELLED
    assert types(run)[-1] == "run_cancelled"
    assert scripted.remaining == 1


def test_a_stale_lease_is_taken_over(people, scripted, enqueued) -> None:
    scripted.enqueue("Done.")
    run = start(people)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING,
        lease_owner="dead:1",
        lease_expires_at=timezone.now() + timedelta(minutes=1),
    )
    assert engine.execute_run(run.pk) is None  # a live lease is respected
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    enqueued.clear()
    assert actions.do_requeue_stale_runs() == [run.pk]
    assert enqueued == [run.pk]
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED


def in_a_thread(work: Any) -> list[object]:
    """Run ``work`` in a new thread; return that thread's connection once it is done."""
    held: list[object] = []

    def target() -> None:
        work()
        held.append(connection.connection)
        connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    return held


def test_the_start_up_sweep_leaves_no_connection_open(transactional_db, enqueued) -> None:
    # A threads-pool worker runs no task in the thread the sweep runs in.
    from agentweb.runs.tasks import _sweep_on_start

    assert in_a_thread(_sweep_on_start) == [None]


def test_the_lease_keeper_lets_its_session_go_once_it_holds_no_run(transactional_db) -> None:
    keeper = leases.LeaseKeeper()
    keeper.idle_seconds = 0.0  # let it go at the first beat without a run

    def sessions() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                "AND objid = %s",
                [lifecycle.RUN_LOCK_SPACE, 424242],
            )
            return cursor.fetchone()[0]

    held = keeper.hold(424242, "test:1")
    wait_for(lambda: held.locked, timeout=10)  # taken by the keeper's thread
    assert keeper._db is not None
    assert sessions() == 1  # the run's lock, in the keeper's own session
    keeper.release("test:1")
    assert sessions() == 0
    wait_for(lambda: keeper._db is None, timeout=10)


def test_a_profile_policy_can_waive_or_demand_approval(people, scripted, enqueued) -> None:
    from agentweb.runs.models import AgentProfile

    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.approval_policies = {"pay_out": {"argument": "amount", "at_least": 50}}
    profile.save()
    scripted.enqueue(call("pay_out", order_id="A1", amount=30), "Paid 30 without asking.")
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    assert sample_tools.SIDE_EFFECTS["A1"] == 1

    profile.approval_policies = {"lookup": "always"}
    profile.save()
    scripted.enqueue(call("lookup", order_id="A2"))
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert Approval.objects.get(run=run).tool == "lookup"


def test_profile_settings_are_validated(db) -> None:
    from django.core.exceptions import ValidationError

    from agentweb.runs.models import AgentProfile

    profile = AgentProfile(
        name="x",
        system_prompt="y",
        risk_overrides={"a": "extreme"},
        approval_policies={"a": {"argument": "amount"}},
    )
    with pytest.raises(ValidationError) as error:
        profile.full_clean()
    assert set(error.value.message_dict) == {"risk_overrides", "approval_policies"}


def test_an_unexpected_error_retries_then_fails_with_the_reason(people, scripted, enqueued) -> None:
    scripted.enqueue(RuntimeError("database went away"))
    run = start(people)
    assert engine.execute_run(run.pk) == Run.Status.RUNNING  # released for a quick retry
    run.refresh_from_db()
    assert run.lease_owner == "" and run.lease_expires_at <= timezone.now()
    assert actions.do_requeue_stale_runs() == [run.pk]
    scripted.enqueue(RuntimeError("database went away"), RuntimeError("database went away"))
    assert engine.execute_run(run.pk) == Run.Status.RUNNING
    assert engine.execute_run(run.pk) == Run.Status.FAILED
    run.refresh_from_db()
    assert "database went away" in run.failure_reason
    assert types(run)[-1] == "run_failed"


def test_a_live_worker_whose_lease_ran_out_keeps_its_run_and_no_step_is_paid_twice(
    people, scripted, enqueued
) -> None:
    """A busy machine starved the lease keeper: the lease ran out while the worker was in
    the middle of a model call. The sweep does not send the run again and no other claim
    takes it over, so that model call (and the step) is paid for once."""
    entered, release = threading.Event(), threading.Event()

    def held_up(messages: Any, tools: Any) -> Any:
        entered.set()
        release.wait(60)  # a safety net only: the test releases it
        return call("lookup", order_id="A1")

    scripted.enqueue(held_up, "Done.")
    run = start(people)
    ended: list[object] = []

    def work() -> None:
        try:
            ended.append(engine.execute_run(run.pk))
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert entered.wait(60)
        Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
        enqueued.clear()
        assert actions.do_requeue_stale_runs() == []  # its worker lives: not sent again
        assert engine.execute_run(run.pk) is None  # nor taken over
        assert enqueued == []
    finally:
        release.set()
        worker.join(60)
    assert ended == [Run.Status.SUCCEEDED]
    assert len(scripted.requests) == 2  # two steps, each model call made once
    run.refresh_from_db()
    assert run.attempts == 1
    assert types(run).count("model_called") == 2


def another_writer_adds_an_event(run: Run) -> None:
    """An event appended to ``run`` by someone else (under the row lock, committed)."""
    with transaction.atomic():
        other = Run.objects.select_for_update().get(pk=run.pk)
        store.append_events(
            other, [{"type": "note", "data": {"by": "elsewhere"}}], status_changed=False
        )


def guards_and_reads(captured: Any) -> tuple[int, int]:
    """How many step guards and reads of the run's row a captured run sent."""
    sent = [q["sql"] for q in captured.captured_queries]
    guards = [sql for sql in sent if ") AS ours)" in sql]
    reads = [sql for sql in sent if "SELECT status, lease_owner" in sql]
    return len(guards), len(reads)


@pytest.mark.parametrize("changed_before_step", [2, 3, 4])
def test_a_step_after_our_own_skips_the_read_and_a_row_changed_meanwhile_is_read(
    people, scripted, enqueued, monkeypatch, changed_before_step
) -> None:
    """A step sends no read of the run's row when the worker knows what is in it: a guard
    at the head of its writes locks the row and fails the transaction unless the row is as
    the claim read it or the worker's last step left it. Here another writer adds an
    event between two steps: that step's guard fails, its writes roll back, and it is
    stored the usual way after the other event, once, with its tool records."""
    from django.test.utils import CaptureQueriesContext

    scripted.enqueue(
        call("lookup", order_id="A1"), call("lookup", order_id="A2"), "Both were delivered."
    )
    run = start(people)
    between = {"steps": 0}
    give_back = engine.dbpool.give_back

    def before_each_step() -> None:  # _drive calls it as each step begins
        between["steps"] += 1
        if between["steps"] == changed_before_step:
            another_writer_adds_an_event(run)
        give_back()

    monkeypatch.setattr(engine.dbpool, "give_back", before_each_step)
    with CaptureQueriesContext(connection) as captured:
        assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    # Five steps, each guarded (the first with the row as the claim read it, the last
    # ends the run); only the one after the other writer's event reads the row.
    assert between["steps"] == 5
    assert guards_and_reads(captured) == (5, 1)
    kinds = types(run)
    assert kinds.count("note") == 1 and seqs(run) == list(range(1, len(kinds) + 1))
    assert [k for k in kinds if k != "note"] == [
        "run_started",
        *["model_called", "tool_call_started", "tool_call_finished"] * 2,
        "model_called",
        "run_finished",
    ]
    records = ToolExecution.objects.filter(run=run).order_by("started_at")
    assert [(r.arguments["order_id"], r.status) for r in records] == [
        ("A1", "succeeded"),
        ("A2", "succeeded"),
    ]
    assert Run.objects.get(pk=run.pk).usage["model_calls"] == 3


def test_a_pause_for_approval_behind_a_failed_guard_opens_its_approval_once(
    people, scripted, enqueued, monkeypatch
) -> None:
    """The step that opens an approval writes the approval before the run's row; when its
    guard then fails, all of it rolls back and the usual way opens it again: one
    approval, one ``approval_requested``, after the other writer's event."""
    from agentweb.runs.models import AgentProfile

    profile = AgentProfile.objects.get(name="ticket-assistant")
    profile.approval_policies = {"lookup": "always"}
    profile.save()
    scripted.enqueue(call("lookup", order_id="A2"))
    run = start(people)
    give_back = engine.dbpool.give_back

    def before_each_step() -> None:
        another_writer_adds_an_event(run)
        give_back()

    monkeypatch.setattr(engine.dbpool, "give_back", before_each_step)
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert engine.execute_run(run.pk) == Run.Status.WAITING_APPROVAL
    assert guards_and_reads(captured) == (1, 1)  # the guard failed, then the usual way
    assert 'INSERT INTO "runs_approval"' in "".join(q["sql"] for q in captured.captured_queries)
    assert Approval.objects.filter(run=run).count() == 1
    kinds = types(run)
    assert kinds == ["note", "run_started", "model_called", "approval_requested"]
    assert seqs(run) == [1, 2, 3, 4]
    assert AuditEntry.objects.filter(run=run, action="approval_requested").count() == 1
