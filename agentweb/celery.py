"""Celery application: tasks are wake-up calls; PostgreSQL holds the truth."""

import os
import warnings
from datetime import timedelta

from celery import Celery, signals
from celery.exceptions import CPendingDeprecationWarning

from agentweb import gcfreeze
from agentweb.observability import logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentweb.settings")

app = Celery("agentweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_ready.connect
def _quiet_cancel_notice(**_: object) -> None:
    # Celery warns at every lost broker connection that long-running tasks will be
    # cancelled by default in 6.0, whatever the setting says; ours says False on purpose
    # (settings.py). Ignored once the worker is ready: its logging set-up (after
    # worker_init) puts an "always" filter for these warnings first.
    warnings.filterwarnings(
        "ignore",
        message=r"\s*In Celery 5\.1 we introduced an optional breaking change",
        category=CPendingDeprecationWarning,
    )


@signals.worker_init.connect
@signals.beat_init.connect
def _patch_broker(**_: object) -> None:
    # kombu's Redis channel must not kill the worker while it closes a connection whose
    # Redis died (agentweb/broker.py says how, and links the upstream report), and an
    # outage is said in lines, not tracebacks (the worker's acks, beat's schedule).
    # Patched as the worker or beat starts, not at import: importing redis pulls in
    # OpenTelemetry, which a process without an OTLP endpoint never imports (test_tracing).
    from agentweb import broker

    broker.install()


if logs.json_enabled():
    # Celery keeps Django's LOGGING (JSON lines) instead of installing its own format.
    signals.setup_logging.connect(
        lambda loglevel=None, **kw: logs.setup_celery_logging(loglevel), weak=False
    )

# Recovery is ours, not the broker's: leases that expired are re-enqueued every two
# seconds (and by each worker as it starts: agentweb.runs.tasks), and approvals past their
# expiry are closed as rejected. This module names tasks only; it imports no domain code.
app.conf.beat_schedule = {
    "requeue-stale-runs": {
        "task": "agentweb.runs.tasks.requeue_stale_runs",
        "schedule": timedelta(seconds=2),
    },
    # Outgoing messages that are due (retries, lost wake-ups, a worker killed mid-send).
    "sweep-deliveries": {
        "task": "agentweb.outbox.tasks.sweep_deliveries",
        "schedule": timedelta(seconds=2),
    },
    # Approvals still pending: escalation (once) and the reminder before expiry (once).
    "escalate-and-remind": {
        "task": "agentweb.notify.tasks.escalate_and_remind",
        "schedule": timedelta(seconds=5),
    },
    # Email in (agentweb/tickets/mailbox.py): the task polls when AGENTWEB_IMAP_POLL_SECONDS
    # have passed since the last poll, and does nothing without AGENTWEB_IMAP_URL.
    "poll-mailbox": {
        "task": "agentweb.tickets.tasks.poll_mailbox",
        "schedule": timedelta(seconds=2),
    },
    "expire-approvals": {
        "task": "agentweb.runs.tasks.expire_approvals",
        "schedule": timedelta(seconds=5),
    },
    # The tool modules' clean-ups (the workbench's old workspaces).
    "housekeeping": {
        "task": "agentweb.runs.tasks.housekeeping",
        "schedule": timedelta(hours=1),
    },
}


def broker_queue_length() -> int | None:
    """Messages waiting in this installation's queue, or None when the broker cannot say."""
    try:
        with app.connection_for_write() as conn:
            declared = conn.default_channel.queue_declare(
                queue=app.conf.task_default_queue, passive=True
            )
            return int(declared.message_count)
    except Exception:  # no queue yet (a Redis restarted empty), or the broker is away
        return None


@signals.worker_ready.connect
def _freeze_start_up(**_: object) -> None:
    # What the worker imported lives as long as it: out of the collector's full passes.
    gcfreeze.freeze_start_up()
