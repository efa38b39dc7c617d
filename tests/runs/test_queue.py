"""One enqueue for every run (``agentweb.runs.queue``), against a real broker that fails.

The broker is a redis-server of the test's own that the test kills -9 at the moment a
transaction that enqueues a run commits, then starts again empty: what stored the run
neither fails nor skips the on-commit work after it, the run is due for the sweep at
once, and the sweep sends it when the broker is back.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py
from django.db import transaction
from django.utils import timezone
from kombu.transport.redis import PRIORITY_STEPS

from agentweb.celery import app
from agentweb.runs import actions, delegation, queue
from agentweb.runs.models import AgentProfile, Run
from tests.hardening.redis_server import RedisServer

RUN_AGENT = "agentweb.runs.tasks.run_agent"


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """Our Celery app sends to a redis-server of this test (new connections, as after a
    fork); the app's own pool and broker come back afterwards."""
    server = RedisServer(tmp_path).start()
    monkeypatch.setitem(app.conf, "broker_url", server.url)
    monkeypatch.setitem(app.conf, "broker_write_url", server.url)
    monkeypatch.setattr(app, "_pool", None)
    monkeypatch.setattr(app.amqp, "_producer_pool", None)
    yield server
    app.pool.force_close_all()
    server.stop()


def sent_runs(server: RedisServer, priority: int | None = None) -> list[int]:
    """The run ids of the run_agent messages waiting in the installation's queue, in the
    order a worker pops them (or those of one priority's list only)."""
    name = app.conf.task_default_queue
    client = redis_py.Redis.from_url(server.url)
    try:
        raw = []
        for step in PRIORITY_STEPS if priority is None else [priority]:
            key = name if step == 0 else f"{name}\x06\x16{step}"  # kombu's names
            raw += reversed(client.lrange(key, 0, -1))  # LPUSH in, RPOP out
    finally:
        client.close()
    ids = []
    for item in raw:
        message = json.loads(item)
        assert message["headers"]["task"] == RUN_AGENT
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        ids.append(args[0])
    return ids


def parent_run(people: dict[str, Any]) -> Run:
    coordinator = AgentProfile.objects.get(name="coordinator")
    return Run.objects.create(
        task="Parcel late and charged twice", agent=coordinator, created_by=people["operator"]
    )


def test_it_sends_by_task_name_to_the_installations_queue(
    people: dict[str, Any], broker: RedisServer
) -> None:
    from agentweb.runs import tasks

    assert tasks.run_agent.name == RUN_AGENT
    parent = parent_run(people)
    child = delegation.create_child(parent.pk, "shipping-specialist", "Where is A1001?", "c1")
    assert sent_runs(broker) == [child.pk]


def test_runs_under_way_are_popped_before_new_ones(
    people: dict[str, Any], broker: RedisServer
) -> None:
    """A new run's wake-up waits in a later list than a resumed run's or a child's, so a
    worker pops those first, whatever was sent before them."""
    new = [
        actions.do_create_run(user=people["operator"], task=f"Where is order A100{i}?")
        for i in range(3)
    ]
    parent = parent_run(people)
    child = delegation.create_child(parent.pk, "shipping-specialist", "Where is A1001?", "c1")
    queue.enqueue(new[0].pk)  # the sweep's re-enqueue of a lost wake-up: under way
    assert sent_runs(broker, queue.NEW) == [r.pk for r in new]
    assert sent_runs(broker, queue.UNDER_WAY) == [child.pk, new[0].pk]
    assert sent_runs(broker) == [child.pk, new[0].pk, *[r.pk for r in new]]
    # What a consumer of the queue gets first (kombu's own read of the lists).
    with app.connection_for_read() as conn:
        message = conn.default_channel.basic_get(app.conf.task_default_queue, no_ack=True)
    assert message is not None and message.decode()[0] == [child.pk]


def test_a_send_from_a_new_thread_makes_no_result_backend_for_it(broker: RedisServer) -> None:
    """The web sends each wake-up from a new thread (one per request): Celery made that
    thread a result backend of its own (and an AsyncResult) for every message, though no
    task of ours keeps a result. The message says so, and the thread gets none."""

    made: list[bool] = []

    def send() -> None:
        queue.send(RUN_AGENT, 41)
        made.append(hasattr(app._local, "backend"))  # Celery's per-thread backend

    thread = threading.Thread(target=send)
    thread.start()
    thread.join(10)
    assert made == [False]
    assert sent_runs(broker) == [41]
    client = redis_py.Redis.from_url(broker.url)
    try:
        (raw,) = client.lrange(app.conf.task_default_queue, 0, -1)
    finally:
        client.close()
    message = json.loads(raw)
    assert message["headers"]["ignore_result"] is True
    assert message["properties"]["reply_to"] == app.oid


def test_a_broker_that_fails_as_a_child_run_commits_fails_nothing(
    people: dict[str, Any], broker: RedisServer
) -> None:
    parent = parent_run(people)
    broker.kill9()
    after: list[str] = []
    with transaction.atomic():  # the tool call's transaction, with more work after commit
        child = delegation.create_child(parent.pk, "billing-specialist", "Charged twice?", "c2")
        transaction.on_commit(lambda: after.append("the next callback ran"))
    assert after == ["the next callback ran"]
    # delegate_task itself, as a tool thread calls it (its own outermost transaction)
    second = delegation.create_child(parent.pk, "shipping-specialist", "Where is A1001?", "c3")
    for run in (child, second):
        run.refresh_from_db()
        assert run.status == Run.Status.QUEUED
        assert run.lease_expires_at is not None and run.lease_expires_at <= timezone.now()

    broker.start()  # back, and empty: the messages were never sent anyway
    assert sent_runs(broker) == []
    assert sorted(actions.do_requeue_stale_runs()) == sorted([child.pk, second.pk])
    assert sorted(sent_runs(broker)) == sorted([child.pk, second.pk])


def test_a_broker_that_fails_as_a_run_is_started_fails_nothing(
    people: dict[str, Any], broker: RedisServer
) -> None:
    broker.kill9()
    run = actions.do_create_run(user=people["operator"], task="Where is order A1001?")
    run.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert run.lease_expires_at is not None and run.lease_expires_at <= timezone.now()
    broker.start()
    assert actions.do_requeue_stale_runs() == [run.pk]
    assert sent_runs(broker) == [run.pk]


def test_a_run_without_a_ticket_is_committed_by_its_insert_before_the_wake_up(
    people: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting a run with no ticket checks nothing against other runs: its INSERT is its
    whole transaction (no BEGIN and COMMIT round trips of Django's), and the worker is
    woken once the row is there for any session to read. A ticket's start still takes
    the ticket's lock and commits once."""
    import psycopg
    from django.db import connection, connections

    from agentweb.tickets.models import Ticket

    params = dict(connection.get_connection_params())
    params.pop("cursor_factory", None)
    other = psycopg.connect(**params, autocommit=True)
    seen: list[tuple[int, object]] = []

    def send(task: str, run_id: int, **_: Any) -> None:  # what the worker would read
        row = other.execute("SELECT status FROM runs_run WHERE id = %s", [run_id]).fetchone()
        seen.append((run_id, row[0] if row else None))

    commits: list[bool] = []
    wrapper = connections["default"]
    real_commit = wrapper.commit

    def commit() -> None:
        commits.append(True)
        real_commit()

    monkeypatch.setattr(queue, "send", send)
    # The profile's first run records its version 1 (a transaction of its own).
    actions.do_create_run(user=people["operator"], task="First")
    seen.clear()
    monkeypatch.setattr(wrapper, "commit", commit)
    try:
        run = actions.do_create_run(user=people["operator"], task="Where is order A1001?")
        assert seen == [(run.pk, Run.Status.QUEUED)]
        assert commits == []  # PostgreSQL committed the INSERT as it answered
        dry = actions.do_create_run(user=people["operator"], task="Try it", mode=Run.Mode.DRY)
        assert seen[-1] == (dry.pk, Run.Status.QUEUED) and commits == []

        ticket = Ticket.objects.create(subject="Parcel late", status="open")
        on_ticket = actions.do_create_run(user=people["operator"], task="", ticket_id=ticket.pk)
        assert seen[-1] == (on_ticket.pk, Run.Status.QUEUED)
        assert commits == [True]  # the ticket's lock and the INSERT, one transaction
        with pytest.raises(actions.TicketBusy):
            actions.do_create_run(user=people["operator"], task="", ticket_id=ticket.pk)
        assert len(seen) == 3
    finally:
        other.close()
