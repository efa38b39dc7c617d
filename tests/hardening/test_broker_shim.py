"""kombu's close path after a Redis death, step by step, against a real redis-server.

The state is the one a Celery worker is in under `make run` when Redis is killed -9: a
late-acked message delivered and not acknowledged, the task channel inside a BRPOP (a
thread is free), and a remote-control channel with an auto-delete fanout queue. Then
what Celery's consumer does on a lost connection: ``collect()``, then ``close()``.
The end-to-end proof is tests/hardening/test_redis_faults.py."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery, beat
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.common import ignore_errors
from kombu.transport import redis as kombu_redis

from agentweb import broker, outages
from agentweb.observability import metrics
from tests.hardening.redis_server import RedisServer


@pytest.fixture
def dead_broker_connection(tmp_path: Path) -> Iterator[Connection]:
    server = RedisServer(tmp_path).start()
    conn = Connection(server.url)
    try:
        tasks = Queue("tasks", Exchange("tasks"), "tasks")
        for run in (1, 2):
            Producer(conn.default_channel).publish(
                {"run": run}, exchange=tasks.exchange, routing_key="tasks", declare=[tasks]
            )
        delivered: list[Any] = []
        consumer = Consumer(
            conn.default_channel,
            [tasks],
            callbacks=[
                lambda body, message: delivered.append(message)  # never acked: a run in flight
            ],
        )
        consumer.consume()
        while len(delivered) < 2:
            conn.drain_events(timeout=2)
        with contextlib.suppress(socket.timeout):
            conn.drain_events(timeout=0.2)  # a free thread: the channel waits in BRPOP
        assert conn.default_channel._in_poll  # type: ignore[attr-defined]
        control = conn.channel()
        pidbox = Queue("node.pidbox", Exchange("pidbox", "fanout"), auto_delete=True)
        Consumer(control, [pidbox]).consume()
        server.kill9()
        conn.delivered = delivered  # type: ignore[attr-defined]
        yield conn
    finally:
        server.stop()


def celery_drops(conn: Connection) -> None:
    """What celery.worker.consumer.Consumer.on_connection_error_after_connected does."""
    with contextlib.suppress(Exception):
        conn.collect(socket_timeout=2)
    ignore_errors(conn, conn.close)


def test_a_dead_connection_closes_without_raising(dead_broker_connection: Connection) -> None:
    broker.install()
    celery_drops(dead_broker_connection)  # raised AttributeError before the shim


def test_kombu_still_needs_the_shim(
    dead_broker_connection: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a kombu release closes such a connection cleanly, this fails: then remove
    agentweb/broker.py."""
    monkeypatch.setattr(kombu_redis.Channel, "_connparams", broker._original_connparams)
    with pytest.raises(AttributeError, match="hostname"):
        celery_drops(dead_broker_connection)


@pytest.fixture(autouse=True)
def new_episodes(monkeypatch: pytest.MonkeyPatch) -> outages.Episodes:
    episodes = outages.Episodes()
    monkeypatch.setattr(broker, "EPISODES", episodes)
    monkeypatch.setattr(metrics, "EPISODES", episodes)
    return episodes


def test_the_late_acks_of_runs_whose_redis_died_are_one_warning_line(
    dead_broker_connection: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Two tasks end after their Redis died and the worker acknowledges them, as Celery
    does (kombu's ``Message.ack_log_error`` with Celery's request logger): that was
    CRITICAL and a 40-line traceback per run in flight on make run's console."""
    broker.install()
    celery_drops(dead_broker_connection)
    logger = logging.getLogger("celery.worker.request")
    with caplog.at_level(logging.DEBUG):
        for message in dead_broker_connection.delivered:  # type: ignore[attr-defined]
            message.ack_log_error(logger, dead_broker_connection.connection_errors)
    [record] = [r for r in caplog.records if r.name == "celery.worker.request"]
    assert (record.levelname, record.exc_info, record.exc_text) == ("WARNING", None, None)
    said = record.getMessage()
    assert said.startswith("could not acknowledge task ") and "went away" in said, said
    assert "Redis went away" in said  # the error itself is kept
    assert "harmless" in said and "sweep" in said and "not logged again" in said


def test_a_scheduled_task_beat_cannot_send_is_one_warning_line_per_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """celery.beat's own Scheduler sending to a Redis killed with -9: it was ERROR with
    the whole stack as a list and the traceback, at every due task."""
    server = RedisServer(tmp_path).start()
    app = Celery("beat-test", broker=server.url)
    app.conf.update(task_publish_retry=False, broker_connection_timeout=1)
    scheduler = beat.Scheduler(app, lazy=True)
    entry = beat.ScheduleEntry(name="sweep", task="runs.sweep", schedule=10.0, app=app)
    try:
        server.kill9()
        broker.install_log_filter()
        with caplog.at_level(logging.DEBUG, logger="celery.beat"):
            scheduler.apply_entry(entry)
            scheduler.apply_entry(entry)
    finally:
        server.stop()
        app.close()
    failed = [r for r in caplog.records if r.name == "celery.beat" and r.levelno >= 30]
    [record] = failed
    assert (record.levelname, record.exc_info, record.exc_text) == ("WARNING", None, None)
    said = record.getMessage()
    assert said.startswith("Couldn't apply scheduled task sweep: Error 111"), said
    assert "the broker is away" in said and "next run" in said and "Traceback" not in said


def test_metrics_that_cannot_reach_redis_say_so_once_per_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = RedisServer(tmp_path).start()
    url = server.url
    monkeypatch.setattr(
        metrics, "_client", redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    )
    buffer = metrics._Buffer()
    lines: list[list[str]] = []
    try:
        for _ in range(2):  # two outages
            server.kill9()
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger=metrics.log.name):
                for _ in range(3):
                    buffer.add("runs_started", 1)
                    assert buffer.flush() is False
                server.start()  # the same port, empty
                assert buffer.flush() is True
            records = [r for r in caplog.records if r.name == metrics.log.name]
            assert all(r.exc_info is None for r in records)
            lines.append([f"{r.levelname} {r.getMessage()}" for r in records])
            assert metrics._client.hget(metrics.redis_key(), "runs_started") == b"3"
    finally:
        server.stop()
    for said in lines:
        warning, back = said
        assert warning.startswith("WARNING could not add metrics to Redis (")
        assert "added when it is back" in warning and "not logged again" in warning
        assert back == "INFO metrics reached Redis again (2 more flushes had failed)"


def test_an_episode_ends_when_the_service_is_back_or_after_a_quiet_while() -> None:
    now = [0.0]
    episodes = outages.Episodes(quiet=60, clock=lambda: now[0])
    assert episodes.first("beat") and not episodes.first("beat")
    assert episodes.first("metrics")  # each kind its own
    now[0] = 50.0
    assert not episodes.first("beat")  # 50 s after the last one: the same outage
    now[0] = 111.0
    assert episodes.first("beat")  # 61 s of quiet: a new one
    assert episodes.over("metrics") == 0 and episodes.over("metrics") is None
    assert episodes.first("metrics")


def test_other_errors_of_those_loggers_keep_their_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker.install_log_filter()
    logger = logging.getLogger("celery.beat")
    with caplog.at_level(logging.ERROR):
        try:
            raise ValueError("a schedule entry that is wrong")
        except ValueError as exc:
            logger.error("Message Error: %s\n%s", exc, ["stack"], exc_info=True)
    [record] = [r for r in caplog.records if r.name == "celery.beat"]
    assert record.levelname == "ERROR" and record.exc_info is not None


def test_publishing_reuses_the_channels_redis_client(tmp_path: Path, monkeypatch) -> None:
    """kombu made a new ``redis.Redis`` for every message it published; with the shim a
    channel makes one per connection pool, and every message still arrives."""
    broker.install_client_reuse()
    server = RedisServer(tmp_path).start()
    made: list[int] = []
    real_init = redis.Redis.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append(1)
        real_init(self, *args, **kwargs)

    try:
        app = Celery("reuse", broker=server.url)
        with app.connection_for_write() as conn:
            conn.default_channel.client  # noqa: B018 -- the channel's own (async) client
            monkeypatch.setattr(redis.Redis, "__init__", counting_init)
            with app.producer_or_acquire() as producer:
                app.send_task("agentweb.nothing", args=[0], queue="reuse", producer=producer)
                first = len(made)  # the queue declared, the first message sent
                for i in range(1, 6):
                    app.send_task("agentweb.nothing", args=[i], queue="reuse", producer=producer)
                assert first >= 1 and len(made) == first  # none made per message
                # A channel with a new pool (reconnected) makes a client for that pool.
                producer.channel._pool = None
                app.send_task("agentweb.nothing", args=[6], queue="reuse", producer=producer)
                assert len(made) == first + 1
            monkeypatch.undo()
            assert redis.Redis.from_url(server.url).llen("reuse") == 7
    finally:
        server.stop()
