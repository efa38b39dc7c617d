"""Logging: ``AGENTWEB_LOG_FORMAT=json`` makes every line one JSON object (README, Observability).

Each object has ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, ``process``
(web | worker | beat), ``pid``, and inside a run ``run_id`` and ``trace_id`` (set by
``run_scope`` around a task, carried into tool threads by the runtime's pool). Values
passed as ``extra=`` are kept; an exception is one ``exc`` string.

This module is imported by settings: it must not import Django models.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

_run: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "agentweb_run_log", default=None
)

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def process_kind(argv: list[str] | None = None) -> str:
    """web | worker | beat, from ``AGENTWEB_PROCESS`` or the command line."""
    explicit = os.environ.get("AGENTWEB_PROCESS", "").strip()
    if explicit:
        return explicit
    args = sys.argv if argv is None else argv
    program = args[0] if args else ""
    # `celery …` or `python -m celery …` (argv[0] is then celery/__main__.py)
    if "celery" in (os.path.basename(program), os.path.basename(os.path.dirname(program))):
        return "beat" if "beat" in args[1:] else "worker"
    return "web"


@contextlib.contextmanager
def run_scope(run_id: int, trace_id: str = "") -> Iterator[dict[str, Any]]:
    """Log lines inside carry ``run_id`` (and ``trace_id``); nests and resets cleanly."""
    fields: dict[str, Any] = {"run_id": run_id}
    if trace_id:
        fields["trace_id"] = trace_id
    token = _run.set(fields)
    try:
        yield fields
    finally:
        _run.reset(token)


def current_run() -> dict[str, Any] | None:
    return _run.get()


class RunContextFilter(logging.Filter):
    """Puts the current run's ``run_id`` and ``trace_id`` on each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _run.get()
        if fields:
            for key, value in fields.items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.process_kind = process_kind()

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": self.process_kind,
            "pid": record.process,
        }
        if record.threadName and record.threadName != "MainThread":
            out["thread"] = record.threadName
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def logging_config(fmt: str, level: str) -> dict[str, Any]:
    """The ``LOGGING`` setting for ``plain`` or ``json`` output."""
    handler: dict[str, Any] = {
        "class": "logging.StreamHandler",
        "formatter": fmt,
        "filters": ["run"],
    }
    if fmt == "json":
        # The real stderr: Celery may later replace sys.stdout/sys.stderr with proxies
        # that log what is printed, and those lines must come back here as JSON too.
        handler["stream"] = "ext://sys.__stderr__"
    loggers: dict[str, Any] = {
        # Django's defaults give these handlers of their own (plain text, and twice
        # under DEBUG); here everything goes through the one handler of the root.
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.server": {"handlers": [], "level": "INFO", "propagate": True},
        "httpx": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "agentweb.access": {"level": "INFO"},
    }
    if logging.getLevelName(level.upper()) in (logging.WARNING, logging.ERROR, logging.CRITICAL):
        # A quiet console (make run's default) says what went wrong with us, not every
        # 404 or 403 a visitor met (Django logs those as WARNING); 5xx stay (ERROR). A
        # refused Host header still warns: it is the sign of a wrong ALLOWED_HOSTS.
        loggers["django.request"] = {"level": "ERROR"}
        loggers["django.security.csrf"] = {"level": "ERROR"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"run": {"()": RunContextFilter}},
        "formatters": {
            "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
            "json": {"()": JsonFormatter},
        },
        "handlers": {"console": handler},
        "root": {"handlers": ["console"], "level": level},
        "loggers": loggers,
    }


def json_enabled() -> bool:
    return os.environ.get("AGENTWEB_LOG_FORMAT", "plain").strip().lower() == "json"


def capture_uncaught() -> None:
    """Uncaught exceptions (main or other threads) are logged, not printed raw."""
    crash = logging.getLogger("agentweb.crash")

    def on_exception(kind: Any, value: Any, tb: Any) -> None:
        crash.critical("uncaught exception", exc_info=(kind, value, tb))

    def on_thread_exception(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        crash.critical(
            "uncaught exception in thread %s",
            args.thread.name if args.thread else "?",
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),  # type: ignore[arg-type]
        )

    sys.excepthook = on_exception
    threading.excepthook = on_thread_exception
    logging.captureWarnings(True)


def route_daphne_access_log() -> None:
    """Daphne writes its access log as NCSA lines straight to stdout; in JSON mode each
    entry becomes a record of the ``agentweb.access`` logger instead."""
    try:
        from daphne.access import AccessLogGenerator
    except ImportError:  # pragma: no cover - daphne is a dependency
        return
    access = logging.getLogger("agentweb.access")

    def write_entry(
        self: Any,
        host: Any,
        date: Any,
        request: str,
        status: Any = None,
        length: Any = None,
        ident: Any = None,
        user: Any = None,
    ) -> None:
        method, _, path = str(request).partition(" ")
        access.info(
            "%s %s",
            request,
            status or "-",
            extra={
                "client": host,
                "method": method,
                "path": path,
                "status": status,
                "size": length,
            },
        )

    AccessLogGenerator.write_entry = write_entry


def setup_celery_logging(loglevel: Any = None) -> None:
    """Receiver of Celery's ``setup_logging`` signal in JSON mode: keep Django's LOGGING,
    let the worker's ``-l`` level apply to Celery's own loggers, and turn anything
    printed later into log records (so it is JSON too)."""
    import logging.config

    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger("celery").setLevel(loglevel)
    capture_uncaught()
    _celery_says_json()
    from celery.utils.log import LoggingProxy

    sys.stdout = LoggingProxy(logging.getLogger("celery.redirected"), logging.WARNING)
    sys.stderr = LoggingProxy(logging.getLogger("celery.redirected"), logging.ERROR)


def _celery_says_json() -> None:
    """The worker's signal handlers write notices ("worker: Warm shutdown") straight to
    the real stdout; make each a JSON line too (written directly: no logging locks in a
    signal handler)."""
    from celery.apps import worker

    formatter = JsonFormatter()

    def safe_say(msg: str, f: Any = sys.__stderr__) -> None:
        record = logging.LogRecord("celery.apps.worker", logging.WARNING, "", 0, msg, None, None)
        print(formatter.format(record), file=f, flush=True)

    worker.safe_say = safe_say
