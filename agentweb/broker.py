"""A shim for kombu's Redis transport: a channel whose connection was already torn down
closes with a connection error instead of an ``AttributeError`` that kills the worker.

What happens without it (kombu 5.7.0, celery 5.7.0, the latest releases), when Redis dies
under a worker that has runs in flight (late-acked messages) and a free thread (so its
task channel is inside a BRPOP):

1. The consumer's event loop gets a ``ConnectionError`` and calls
   ``Consumer.on_connection_error_after_connected``, which first ``collect()``s the
   connection: ``_do_close_self()`` closes the task channel, whose ``close()`` first
   finishes the pending BRPOP, fails on the dead socket and raises *before* the channel
   is marked closed; closing the remote-control (pidbox) channel then raises too, while
   it deletes its fanout queue, so the transport gives up closing the rest. ``collect()``
   then detaches the transport: ``transport.client = None``.
2. Celery then ``close()``s the same connection "to release the old socket". The task
   channel is closed a second time; this time it gets past the BRPOP and, as any channel
   closes, restores its unacknowledged messages; that needs a Redis client, whose
   parameters come from ``transport.client``, now ``None``: ``AttributeError: 'NoneType'
   object has no attribute 'hostname'``. ``ignore_errors`` only swallows connection and
   channel errors, so it reaches the worker: "Unrecoverable error", the worker exits.

The same traceback from another close path (gossip's) is kombu issue 582,
https://github.com/celery/kombu/issues/582 ; kombu's Redis channel still builds its
connection parameters from a transport that may have been detached. Here a channel that
has no connection left raises the transport's own ``ConnectionError``, which every
caller on the close paths already ignores. Nothing is lost by not restoring those
messages: a Redis that died lost them anyway, and the runs they woke are PostgreSQL rows
that beat's sweep re-enqueues (``requeue_stale_runs``) once their lease expires.

``tests/hardening/test_broker_shim.py`` shows the crash without the shim on the same
sequence, and ``tests/hardening/test_redis_faults.py`` kills a real Redis under the worker.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu import exceptions as kombu_exceptions
from kombu.transport import redis as kombu_redis
from redis import exceptions as redis_exceptions

from agentweb.outages import EPISODES

_original_connparams = kombu_redis.Channel._connparams


def _connparams(self: Any, asynchronous: bool = False) -> Any:
    transport = self.connection
    if transport is None or transport.client is None:
        raise redis_exceptions.ConnectionError(
            "this broker channel's connection is closed (its Redis went away)"
        )
    return _original_connparams(self, asynchronous=asynchronous)


_original_create_client = kombu_redis.Channel._create_client
_CLIENT = "_agentweb_client"


def _create_client(self: Any, asynchronous: bool = False) -> Any:
    """kombu's, except that a channel's client for plain commands is made once per
    connection pool: kombu builds a new ``redis.Redis`` for every message it publishes,
    and making one (its table of some 170 reply callbacks) was a quarter of the CPU of
    sending a run's wake-up message. The client only borrows connections from the pool,
    so sharing it is safe; a channel that gets a new pool (reconnected) gets a new one."""
    if asynchronous:
        return _original_create_client(self, asynchronous)
    pool = self.pool
    made = self.__dict__.get(_CLIENT)
    if made is None or made[0] is not pool:
        made = (pool, _original_create_client(self, False))
        self.__dict__[_CLIENT] = made
    return made[1]


def install() -> None:
    """Patch kombu's Redis channel once per process (idempotent), and say a broker outage
    in one line per event (``install_log_filter``)."""
    if kombu_redis.Channel._connparams is not _connparams:
        kombu_redis.Channel._connparams = _connparams  # type: ignore[method-assign]
    install_client_reuse()
    install_log_filter()


def install_client_reuse() -> None:
    """``_create_client`` on kombu's Redis channel (idempotent): by ``install`` as a
    worker or beat starts, and by ``runs.queue.send`` in any process (the web's)."""
    if kombu_redis.Channel._create_client is not _create_client:
        kombu_redis.Channel._create_client = _create_client  # type: ignore[method-assign]


#: The loggers whose records of a broker outage are tracebacks of what is expected: beat
#: sending a scheduled task ("Message Error: ..." with the exception, the whole stack as a
#: list, and the traceback again), and a worker acknowledging a message whose Redis died
#: (CRITICAL "Couldn't ack ..." with a traceback, kombu's ``Message.ack_log_error``).
OUTAGE_LOGGERS = ("celery.beat", "celery.worker.request")


def broker_away(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is the broker's connection failing."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, redis_exceptions.ConnectionError | kombu_exceptions.OperationalError):
            return True
        if isinstance(exc, ConnectionError):  # refused, reset, broken pipe
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class BrokerAwayFilter(logging.Filter):
    """A broker outage in one WARNING line per episode, not a traceback per attempt: when
    Redis dies a console got some 800 lines per outage from beat and the worker (under
    ``make run``, 100 tracebacks for three outages) for things that mend themselves. The
    first record of an episode (``outages.EPISODES``, by logger) becomes the line, with
    what failed; the repeats are dropped. Anything that is not a broker connection error
    is left alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not broker_away(exc):
            return True
        if not EPISODES.first(record.name):
            return False  # said once for this outage
        if record.name == "celery.beat":
            record.msg = (
                "%s: the broker is away; beat sends its tasks again at their next run "
                "(not logged again during this outage)"
            )
            record.args = (exc,)
        elif record.name == "celery.worker.request" and record.msg.startswith("Couldn't ack"):
            tag = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg = (
                "could not acknowledge task %r: the Redis it came from went away (%s); "
                "harmless: runs are PostgreSQL rows and beat's sweep sends any that still "
                "need a worker once their lease expires (not logged again during this outage)"
            )
            record.args = (tag, exc)
        record.exc_info = None
        record.exc_text = None
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def install_log_filter() -> None:
    """Put ``BrokerAwayFilter`` on the outage loggers once per process (idempotent)."""
    for name in OUTAGE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, BrokerAwayFilter) for f in logger.filters):
            logger.addFilter(BrokerAwayFilter())
