"""Delegation in-process: child runs, the durable wait, the wake-up, limits, cancellation.

Each profile has a model spec of its own, so the parent and each child read their own
scripted model; ``drain`` plays one worker thread taking enqueued runs in order.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import close_old_connections, connection, transaction

from agentweb.runs import actions, delegation, engine, lifecycle
from agentweb.runs.models import AgentProfile, Approval, Run, RunEvent
from agentweb.runtime.execution import ToolPool
from agentweb.runtime.gateway import ModelError
from agentweb.runtime.messages import SystemMessage, ToolMessage, UserMessage
from agentweb.runtime.testing import ScriptedModel, call
from agentweb.runtime.tools import Suspend, ToolContext


@pytest.fixture(scope="module", autouse=True)
def _close_pool_connections(django_db_setup: None) -> Iterator[None]:
    """The delegation tools run in the runtime's pool threads, which keep a DB connection
    each; close them so the test database can be dropped."""
    yield
    from agentweb.runtime.execution import shared_pool

    workers = [t for t in threading.enumerate() if t.name.startswith("agentweb-tool")]
    if not workers:
        return
    barrier = threading.Barrier(len(workers), timeout=10)

    def close() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()  # one task per thread: every worker is busy at once
        connection.close()

    for future in [shared_pool().submit(close) for _ in workers]:
        future.result()


@pytest.fixture
def models(monkeypatch: pytest.MonkeyPatch, sample_registry: None) -> dict[str, ScriptedModel]:
    from agentweb.runs import agents

    by_spec: dict[str, ScriptedModel] = {}

    def model_for(spec: str) -> ScriptedModel:
        return by_spec.setdefault(spec, ScriptedModel(name=spec))

    monkeypatch.setattr(agents, "model_for", model_for)
    return by_spec


@pytest.fixture
def team(people: dict[str, Any], models: dict[str, ScriptedModel]) -> dict[str, Any]:
    """coordinator → shipping, billing; shipping may delegate too (to test depth)."""
    for name in ("billing", "shipping", "lead"):
        AgentProfile.objects.create(
            name=name,
            system_prompt=f"You are the {name} agent.",
            model=f"scripted:{name}",
            delegates={"lead": ["shipping", "billing"], "shipping": ["shipping"]}.get(name, []),
        )
    return {**people, "models": models}


def model(team: dict[str, Any], name: str) -> ScriptedModel:
    models: dict[str, ScriptedModel] = team["models"]
    return models.setdefault(f"scripted:{name}", ScriptedModel(name=name))


def start(team: dict[str, Any], task: str = "Parcel late and charged twice") -> Run:
    return actions.do_create_run(user=team["operator"], task=task, agent_name="lead")


def drain(enqueued: list[int], limit: int = 50) -> list[int]:
    """One worker thread: take enqueued runs in order until none is left."""
    done = []
    while enqueued and limit:
        limit -= 1
        run_id = enqueued.pop(0)
        engine.execute_run(run_id)
        done.append(run_id)
    assert not enqueued, "runs still enqueued after the limit"
    return done


def types(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


def events(run: Run, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in RunEvent.objects.filter(run=run, type=kind).order_by("seq")]


def tool_results(scripted: ScriptedModel, request: int) -> list[ToolMessage]:
    return [m for m in scripted.requests[request].messages if isinstance(m, ToolMessage)]


def test_it_delegates_in_parallel_waits_durably_and_resumes_with_the_results(
    team, enqueued
) -> None:
    coordinator = model(team, "lead")
    delegate_a = call("delegate_task", agent="shipping", task="Where is parcel 1Z9?")
    delegate_b = call("delegate_task", agent="billing", task="Was order A1 charged twice?")
    coordinator.enqueue([delegate_a, delegate_b])
    coordinator.enqueue(lambda messages, tools: _wait_for_all(messages))
    coordinator.enqueue("The parcel is in transit and the second charge was refunded.")
    model(team, "shipping").enqueue(call("lookup", order_id="A1"), "In transit, due Friday.")
    model(team, "billing").enqueue("Charged twice; the duplicate is already reversed.")
    run = start(team)
    assert enqueued == [run.pk]
    enqueued.clear()
    assert engine.execute_run(run.pk) == Run.Status.WAITING_SUBTASKS
    run.refresh_from_db()
    assert run.lease_owner == "" and run.lease_expires_at is None  # no worker holds it
    # In the order of the calls (they ran concurrently, so ids may be in either order).
    by_call = {c.parent_call_id: c for c in run.children.all()}
    children = [by_call[delegate_a.id], by_call[delegate_b.id]]
    assert sorted(enqueued) == sorted(c.pk for c in children)  # each enqueued once, at once
    assert [(c.agent.name, c.depth, c.root_id, c.parent_call_id) for c in children] == [
        ("shipping", 2, run.pk, delegate_a.id),
        ("billing", 2, run.pk, delegate_b.id),
    ]
    assert {c.created_by_id for c in children} == {team["operator"].pk}
    assert run.awaiting_tasks == [c.pk for c in children]
    started = events(run, "subtask_started")
    assert started == [
        {"task_id": children[0].pk, "agent": "shipping", "task": "Where is parcel 1Z9?"},
        {"task_id": children[1].pk, "agent": "billing", "task": "Was order A1 charged twice?"},
    ]
    drain(enqueued)  # both children, then the parent woken by the last of them
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED, run.failure_reason
    assert run.final_answer.startswith("The parcel is in transit")
    # The parent's model got one result per task, in the order asked.
    waited = tool_results(coordinator, 2)[-1]
    assert waited.name == "wait_for_tasks"
    assert '"status": "succeeded"' in waited.content
    assert "In transit, due Friday." in waited.content
    assert "already reversed" in waited.content
    finished = events(run, "subtask_finished")
    assert {f["task_id"] for f in finished} == {c.pk for c in children}
    assert all(f["status"] == "succeeded" for f in finished)
    seqs = list(RunEvent.objects.filter(run=run).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    # Isolation: a child saw its own prompt and its task, nothing of the parent's talk.
    seen = model(team, "shipping").requests[0].messages
    assert [type(m) for m in seen] == [SystemMessage, UserMessage]
    assert seen[0].content == "You are the shipping agent."
    assert seen[1].content == "Where is parcel 1Z9?"
    # The built-in tools are low risk: they are not "actions" with a fate.
    assert run.actions() == []
    # Usage rolls up: the parent's totals include the children's calls.
    assert run.usage["model_calls"] == 3 + 2 + 1
    assert run.usage["children"]["model_calls"] == 3
    for scripted in team["models"].values():
        scripted.assert_complete()


def _wait_for_all(messages: Any) -> Any:
    import json

    ids = [json.loads(m.content)["task_id"] for m in messages if isinstance(m, ToolMessage)]
    return call("wait_for_tasks", task_ids=ids)


def test_a_failed_and_a_cancelled_child_come_back_as_failed_with_the_reason(team, enqueued) -> None:
    coordinator = model(team, "lead")
    coordinator.enqueue(
        [
            call("delegate_task", agent="shipping", task="Track it"),
            call("delegate_task", agent="billing", task="Check the charge"),
        ],
        lambda messages, tools: _wait_for_all(messages),
        "One specialist failed, the other was stopped; I will handle it myself.",
    )
    model(team, "shipping").enqueue(ModelError("provider down"))
    run = start(team)
    enqueued.clear()
    assert engine.execute_run(run.pk) == Run.Status.WAITING_SUBTASKS
    shipping, billing = (
        run.children.get(agent__name="shipping"),
        run.children.get(agent__name="billing"),
    )
    enqueued.remove(billing.pk)
    actions.do_request_cancel(billing, team["admin"])  # queued: cancelled at once
    drain(enqueued)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    results = {f["task_id"]: f for f in events(run, "subtask_finished")}
    assert results[billing.pk] == {
        "task_id": billing.pk,
        "status": "failed",
        "error": "the task was cancelled",
    }
    assert results[shipping.pk]["status"] == "failed"
    assert "provider down" in results[shipping.pk]["error"]
    waited = tool_results(coordinator, 2)[-1].content
    assert waited.count('"status": "failed"') == 2


def test_limits_fail_the_call_and_the_run_continues(team, enqueued) -> None:
    coordinator = model(team, "lead")
    coordinator.enqueue(
        [call("delegate_task", agent="billing", task=f"job {i}") for i in range(11)],
        [call("delegate_task", agent="nobody", task="x")],
        "Ten jobs are running.",
    )
    run = start(team)
    engine.execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED  # the parent went on after the refusals
    assert run.children.count() == 10
    first_turn = tool_results(coordinator, 1)
    assert sum("task_id" in m.content for m in first_turn) == 10
    refused = [m for m in first_turn if m.is_error]
    assert len(refused) == 1 and "at most 10" in refused[0].content
    unknown = tool_results(coordinator, 2)[-1]
    assert unknown.is_error and "unknown agent 'nobody'" in unknown.content
    # The parent ended without waiting: its active children are cancelled.
    assert set(run.children.values_list("status", flat=True)) == {Run.Status.CANCELLED}


def test_depth_three_may_not_delegate(team, enqueued) -> None:
    shipping = model(team, "shipping")
    wait = lambda messages, tools: _wait_for_all(messages)  # noqa: E731
    shipping.enqueue(
        call("delegate_task", agent="shipping", task="level 2"),  # top
        wait,
        call("delegate_task", agent="shipping", task="level 3"),  # level 2
        wait,
        call("delegate_task", agent="shipping", task="level 4"),  # level 3: refused
        "level 3 done",
        "level 2 done",
        "level 1 done",
    )
    top = actions.do_create_run(user=team["operator"], task="level 1", agent_name="shipping")
    drain(enqueued)
    top.refresh_from_db()
    level2 = top.children.get()
    level3 = level2.children.get()
    assert (level2.depth, level3.depth, level3.root_id) == (2, 3, top.pk)
    assert not level3.children.exists()
    refused = tool_results(shipping, 5)[-1]
    assert refused.is_error and "depth 3" in refused.content
    assert [r.status for r in (top, level2, level3)] == [Run.Status.SUCCEEDED] * 3
    assert [
        r.final_answer for r in Run.objects.filter(pk__in=[level3.pk, top.pk]).order_by("pk")
    ] == [
        "level 1 done",
        "level 3 done",
    ]
    assert top.usage["model_calls"] == 8  # every level's calls roll up to the top
    shipping.assert_complete()


def test_cancelling_the_parent_cancels_its_subtree(team, enqueued) -> None:
    coordinator, shipping = model(team, "lead"), model(team, "shipping")
    coordinator.enqueue(
        [call("delegate_task", agent="shipping", task="Track it")],
        lambda messages, tools: _wait_for_all(messages),
    )
    shipping.enqueue(
        [call("delegate_task", agent="shipping", task="Ask the carrier")],
        lambda messages, tools: _wait_for_all(messages),
    )
    model(team, "billing")
    run = start(team)
    enqueued.clear()
    engine.execute_run(run.pk)
    child = run.children.get()
    engine.execute_run(child.pk)
    grandchild = child.children.get()
    grandchild_model = shipping
    grandchild_model.enqueue(call("pay_out", order_id="A1", amount=10))
    engine.execute_run(grandchild.pk)
    grandchild.refresh_from_db()
    assert grandchild.status == Run.Status.WAITING_APPROVAL
    assert Run.objects.get(pk=child.pk).status == Run.Status.WAITING_SUBTASKS
    enqueued.clear()
    actions.do_request_cancel(run, team["admin"])
    for r in (run, child, grandchild):
        r.refresh_from_db()
        assert r.status == Run.Status.CANCELLED, r
    assert Approval.objects.get(run=grandchild).status != Approval.Status.PENDING
    assert enqueued == []  # no parent was woken


def test_four_eyes_inside_a_child_counts_the_top_runs_starter(team, enqueued) -> None:
    coordinator = model(team, "lead")
    coordinator.enqueue(
        [call("delegate_task", agent="billing", task="Refund 30 on A1")],
        lambda messages, tools: _wait_for_all(messages),
    )
    model(team, "billing").enqueue(call("pay_out", order_id="A1", amount=30), "Refunded 30.")
    # An approver starts the top run: the child's call is still "their" run's call.
    run = actions.do_create_run(user=team["approver"], task="Refund", agent_name="lead")
    enqueued.clear()
    engine.execute_run(run.pk)
    child = run.children.get()
    enqueued.clear()
    assert engine.execute_run(child.pk) == Run.Status.WAITING_APPROVAL
    approval = Approval.objects.get(run=child)
    with pytest.raises(actions.NotAllowed, match="four-eyes"):
        actions.do_decide_approval(
            approval_id=approval.pk, user=team["approver"], decision="approve"
        )
    actions.do_decide_approval(approval_id=approval.pk, user=team["admin"], decision="approve")
    assert enqueued == [child.pk]


def test_the_last_child_wakes_the_parent_exactly_once(team, enqueued) -> None:
    """Ten children end at the same instant, in ten threads, while the parent stores its
    pause: the parent is woken once and sees every child's subtask_finished."""
    for attempt in range(3):
        parent = start(team, f"round {attempt}")
        enqueued.clear()
        Run.objects.filter(pk=parent.pk).update(status=Run.Status.RUNNING, lease_owner="w")
        children = [
            delegation.create_child(parent.pk, "billing", f"job {i}", f"c{i}") for i in range(10)
        ]
        Run.objects.filter(pk__in=[c.pk for c in children]).update(status=Run.Status.RUNNING)
        barrier = threading.Barrier(11)
        wakes: list[int] = []
        errors: list[BaseException] = []

        def end_child(child: Run) -> None:
            try:
                barrier.wait()
                with transaction.atomic():
                    locked = Run.objects.select_for_update().get(pk=child.pk)
                    locked.status = Run.Status.SUCCEEDED
                    locked.final_answer = f"done {child.pk}"
                    locked.save(update_fields=["status", "final_answer"])
                    lifecycle.ended(locked)
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        def pause() -> None:
            from agentweb.runtime.loop import NeedsSubtasks

            try:
                barrier.wait()
                with transaction.atomic():
                    locked = Run.objects.select_for_update().get(pk=parent.pk)
                    update = lifecycle.outcome_fields(
                        locked, NeedsSubtasks(["w"], [c.pk for c in children]), []
                    )
                    Run.objects.filter(pk=parent.pk).update(**update)
                    if update["status"] == Run.Status.QUEUED:
                        wakes.append(parent.pk)
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=end_child, args=(c,)) for c in children]
        threads.append(threading.Thread(target=pause))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        close_old_connections()
        assert not errors, errors
        parent.refresh_from_db()
        assert parent.status == Run.Status.QUEUED, "the parent was never woken"
        assert enqueued.count(parent.pk) == 1
        assert len(events(parent, "subtask_finished")) == 10
        seqs = list(RunEvent.objects.filter(run=parent).values_list("seq", flat=True))
        assert seqs == list(range(1, len(seqs) + 1))


def test_a_delegation_call_leaves_its_pool_thread_without_a_connection(team, enqueued) -> None:
    # Tools run in long-lived pool threads; with the default CONN_MAX_AGE of 0 a thread
    # holds no connection once its call is done.
    run = start(team)
    delegate, wait = delegation.tools_for(AgentProfile.objects.get(name="lead"))
    ctx = ToolContext(call_id="c1", run_id=str(run.pk))
    pool = ToolPool(max_workers=1)  # one thread: each probe runs where the calls ran

    def wait_for(task_id: int) -> None:
        with contextlib.suppress(Suspend):
            wait.fn(task_ids=[task_id], ctx=ctx)

    task_id = pool.submit(lambda: delegate.fn(agent="billing", task="Charged twice?", ctx=ctx))
    held = [pool.submit(lambda: connection.connection).result(30)]
    pool.submit(lambda: wait_for(task_id.result(30)["task_id"])).result(30)
    held.append(pool.submit(lambda: connection.connection).result(30))
    assert held == [None, None]


def test_unknown_delegates_are_refused_naming_the_field(team) -> None:
    profile = AgentProfile(name="chief", system_prompt="x", delegates=["billing", "ghost"])
    with pytest.raises(ValidationError) as err:
        profile.full_clean()
    assert "ghost" in str(err.value.message_dict["delegates"])
    AgentProfile(name="chief", system_prompt="x", delegates=["billing", "chief"]).full_clean()
    assert "delegate_task" not in [t.name for t in delegation.tools_for(profile.__class__())]


def test_a_running_child_of_an_ended_parent_stops_at_its_next_step(team, enqueued) -> None:
    from datetime import timedelta

    from django.utils import timezone

    parent = start(team)
    child = delegation.create_child(parent.pk, "billing", "Check the charge", "c-1")
    # A worker holds the child and then dies (its lease lapses).
    Run.objects.filter(pk=child.pk).update(
        status=Run.Status.RUNNING,
        lease_owner="gone",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    actions.do_request_cancel(parent, team["admin"])
    child.refresh_from_db()
    assert child.status == Run.Status.RUNNING and child.cancel_requested
    assert engine.execute_run(child.pk) == Run.Status.CANCELLED
    parent.refresh_from_db()
    assert events(parent, "subtask_finished") == [
        {"task_id": child.pk, "status": "failed", "error": "the task was cancelled"}
    ]
    assert not model(team, "billing").requests  # no model call after the cancel
