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
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.common import ignore_errors
from kombu.transport import redis as kombu_redis

from agentweb import broker
from tests.hardening.redis_server import RedisServer


@pytest.fixture
def dead_broker_connection(tmp_path: Path) -> Iterator[Connection]:
    server = RedisServer(tmp_path).start()
    conn = Connection(server.url)
    try:
        tasks = Queue("tasks", Exchange("tasks"), "tasks")
        Producer(conn.default_channel).publish(
            {"run": 1}, exchange=tasks.exchange, routing_key="tasks", declare=[tasks]
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
        conn.drain_events(timeout=2)
        assert len(delivered) == 1
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


def test_the_late_ack_of_a_run_whose_redis_died_is_one_warning_line(
    dead_broker_connection: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """The task ends after its Redis died and the worker acknowledges it, as Celery does
    (kombu's ``Message.ack_log_error`` with Celery's request logger): that was CRITICAL
    and a 40-line traceback per run in flight on make run's console."""
    broker.install()
    celery_drops(dead_broker_connection)
    [message] = dead_broker_connection.delivered  # type: ignore[attr-defined]
    logger = logging.getLogger("celery.worker.request")
    with caplog.at_level(logging.WARNING):
        message.ack_log_error(logger, dead_broker_connection.connection_errors)
    [record] = [r for r in caplog.records if r.name == "celery.worker.request"]
    assert (record.levelname, record.exc_info, record.exc_text) == ("WARNING", None, None)
    said = record.getMessage()
    assert said.startswith("could not acknowledge task ") and "went away" in said, said
    assert "Redis went away" in said  # the error itself is kept


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
