"""Prometheus metrics of every process (README, Observability).

Counters and histograms live in Redis, so ``/metrics`` on any web process covers every
worker, including ones started on other machines: each process adds what its stored
events say (after commit) to a small in-memory buffer that a background thread adds to
one Redis hash every ``FLUSH_SECONDS`` (one pipelined round trip; the step's thread never
waits for Redis). A scrape reads that hash (one HGETALL, its size is the number of
series, not of runs) and two indexed counts from PostgreSQL for the gauges.

Counters restart from zero if Redis loses its data; Prometheus treats that as a reset.
Increments buffered in a process that is killed (at most ``FLUSH_SECONDS`` worth) are lost.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings

from agentweb.env import redis_urls
from agentweb.outages import EPISODES
from agentweb.runs.hooks import StoredStep
from agentweb.runtime import events as ev

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.25
LABEL_MAX = 100

# name -> (help, label names)
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "agentweb_runs_started_total": ("Runs whose first step was stored.", ("agent",)),
    "agentweb_runs_total": ("Runs that ended, by final status and agent.", ("status", "agent")),
    "agentweb_tool_errors_total": ("Tool calls that returned ok=false.", ("tool",)),
    "agentweb_tokens_total": ("Model tokens by model and type (input|output).", ("model", "type")),
    "agentweb_cost_usd_total": ("Estimated model cost in US dollars, by model.", ("model",)),
    "agentweb_budget_exhausted_total": (
        "Runs a budget stopped before a model call, by budget "
        "(run_cost, run_tokens, profile_daily_cost, team_daily_cost).",
        ("scope",),
    ),
}
# name -> (help, label names, bucket upper bounds)
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...], tuple[float, ...]]] = {
    "agentweb_run_duration_seconds": (
        "From a run's start (or creation) to its end, pauses included.",
        (),
        (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400, 86400),
    ),
    "agentweb_model_call_duration_seconds": (
        "Latency of one model call.",
        ("model",),
        (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
    ),
    "agentweb_tool_call_duration_seconds": (
        "Duration of one tool call.",
        ("tool",),
        (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    ),
    "agentweb_approval_wait_seconds": (
        "From an approval request to its decision (or expiry).",
        (),
        (5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400),
    ),
}


def _label(value: Any) -> str:
    text = str(value if value is not None else "")
    return text[:LABEL_MAX] or "unknown"


def _field(name: str, labels: Sequence[str], part: str = "") -> str:
    return _field_of(name, tuple(labels), part)


@functools.lru_cache(maxsize=4096)
def _field_of(name: str, labels: tuple[str, ...], part: str) -> str:
    """A metric's Redis hash field; the same few recur at every step (one encoding each,
    not eight JSON dumps per stored step)."""
    return json.dumps([name, list(labels), part], separators=(",", ":"))


class _Buffer:
    """Increments not yet in Redis, summed per field; flushed by one daemon thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ints: dict[str, int] = {}
        self.floats: dict[str, float] = {}
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.pid = 0

    def add(self, field: str, amount: int) -> None:
        self.ints[field] = self.ints.get(field, 0) + amount

    def add_float(self, field: str, amount: float) -> None:
        self.floats[field] = self.floats.get(field, 0.0) + amount

    def ensure_thread(self) -> None:
        if self.thread is None or self.pid != os.getpid() or not self.thread.is_alive():
            self.pid = os.getpid()
            self.ints, self.floats = {}, {}  # a forked child starts empty
            self.thread = threading.Thread(target=self._loop, name="metrics-flush", daemon=True)
            self.thread.start()

    def _loop(self) -> None:
        while True:
            self.wake.wait(FLUSH_SECONDS)
            self.wake.clear()
            self.flush()

    def flush(self) -> bool:
        with self.lock:
            ints, floats = self.ints, self.floats
            self.ints, self.floats = {}, {}
        if not ints and not floats:
            return True
        try:
            pipe = _redis().pipeline(transaction=False)
            key = redis_key()
            for field, amount in ints.items():
                pipe.hincrby(key, field, amount)
            for field, value in floats.items():
                pipe.hincrbyfloat(key, field, value)
            pipe.execute()
        except Exception as exc:  # Redis away: keep the increments for the next try
            # One line per outage: while Redis is down this runs at every flush.
            if EPISODES.first("metrics"):
                log.warning(
                    "could not add metrics to Redis (%s); they are kept and added when it "
                    "is back (not logged again during this outage)",
                    exc,
                )
            with self.lock:
                for field, amount in ints.items():
                    self.add(field, amount)
                for field, value in floats.items():
                    self.add_float(field, value)
            return False
        missed = EPISODES.over("metrics")
        if missed is not None:
            log.info("metrics reached Redis again (%d more flushes had failed)", missed)
        return True


_buffer = _Buffer()
_client: redis.Redis | None = None
_client_lock = threading.Lock()


def _redis() -> redis.Redis:
    global _client
    with _client_lock:
        if _client is None:
            import redis as redis_lib  # here: redis imports OpenTelemetry's API

            url = redis_urls(settings.REDIS_URL)[1]
            _client = redis_lib.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        return _client


def redis_key() -> str:
    return f"agentweb:metrics:{settings.CELERY_TASK_DEFAULT_QUEUE}"


def flush() -> bool:
    """Send buffered increments now (tests, process exit)."""
    return _buffer.flush()


atexit.register(flush)


# --- counting ----------------------------------------------------------------------------


class _Batch:
    def __init__(self) -> None:
        self.ints: list[tuple[str, int]] = []
        self.floats: list[tuple[str, float]] = []

    def inc(self, name: str, labels: Sequence[Any], amount: int = 1) -> None:
        self.ints.append((_field(name, [_label(v) for v in labels]), amount))

    def inc_float(self, name: str, labels: Sequence[Any], amount: float) -> None:
        self.floats.append((_field(name, [_label(v) for v in labels]), amount))

    def observe(self, name: str, labels: Sequence[Any], seconds: float) -> None:
        seconds = max(0.0, float(seconds))
        values = [_label(v) for v in labels]
        buckets = HISTOGRAMS[name][2]
        index = next((i for i, bound in enumerate(buckets) if seconds <= bound), len(buckets))
        self.ints.append((_field(name, values, f"b{index}"), 1))
        self.ints.append((_field(name, values, "count"), 1))
        self.floats.append((_field(name, values, "sum"), seconds))


def record(step: StoredStep) -> None:
    """Count what a stored batch of events says."""
    batch = _Batch()
    for event in step.typed_events():
        match event:
            case ev.ModelCalled(tokens=tokens):
                model = event.model or step.model
                tokens = tokens or {}
                batch.inc("agentweb_tokens_total", [model, "input"], int(tokens.get("input") or 0))
                batch.inc(
                    "agentweb_tokens_total", [model, "output"], int(tokens.get("output") or 0)
                )
                if event.cost:
                    batch.inc_float("agentweb_cost_usd_total", [model], float(event.cost))
                seconds = float(event.latency_ms or 0) / 1000
                batch.observe("agentweb_model_call_duration_seconds", [model], seconds)
            case ev.ToolCallFinished(reused=False, tool=tool):
                seconds = float(event.duration_ms or 0) / 1000
                batch.observe("agentweb_tool_call_duration_seconds", [tool], seconds)
                if not event.ok:
                    batch.inc("agentweb_tool_errors_total", [tool])
            case ev.RunStarted():
                batch.inc("agentweb_runs_started_total", [step.agent()])
            case ev.RunFailed(budget=budget) if budget:
                batch.inc("agentweb_budget_exhausted_total", [budget])
    for requested, decided in step.approval_times().values():
        end = decided.timestamp() if decided else step.stored_ns / 1e9
        batch.observe("agentweb_approval_wait_seconds", [], end - requested.timestamp())
    status = step.final_status
    if status is not None:
        batch.inc("agentweb_runs_total", [status, step.agent()])
        started = (step.started_at or step.created_at).timestamp()
        batch.observe("agentweb_run_duration_seconds", [], step.stored_ns / 1e9 - started)
    if not batch.ints and not batch.floats:
        return
    with _buffer.lock:
        _buffer.ensure_thread()
        for field, amount in batch.ints:
            _buffer.add(field, amount)
        for field, value in batch.floats:
            _buffer.add_float(field, value)


# --- the scrape --------------------------------------------------------------------------


def _parse(raw: Mapping[bytes, bytes]) -> dict[tuple[str, tuple[str, ...], str], float]:
    values: dict[tuple[str, tuple[str, ...], str], float] = {}
    for field, value in raw.items():
        try:
            name, labels, part = json.loads(field)
            values[(name, tuple(labels), part)] = float(value)
        except (ValueError, TypeError):
            continue
    return values


class Collector:
    """A prometheus_client collector over the Redis hash and PostgreSQL gauges."""

    def __init__(self, stored: Mapping[bytes, bytes], gauges: Mapping[str, Any]) -> None:
        self.values = _parse(stored)
        self.gauges = gauges

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        for name, (doc, label_names) in COUNTERS.items():
            family = CounterMetricFamily(name.removesuffix("_total"), doc, labels=label_names)
            for (metric, labels, part), value in sorted(self.values.items()):
                if metric == name and part == "" and len(labels) == len(label_names):
                    family.add_metric(list(labels), value)
            yield family
        for name, (doc, label_names, buckets) in HISTOGRAMS.items():
            histogram = HistogramMetricFamily(name, doc, labels=label_names)
            series = sorted(
                {labels for (metric, labels, _), _ in self.values.items() if metric == name}
            )
            for labels in series:
                if len(labels) != len(label_names):
                    continue
                cumulative, points = 0.0, []
                for i, bound in enumerate((*buckets, float("inf"))):
                    cumulative += self.values.get((name, labels, f"b{i}"), 0.0)
                    points.append((_bound(bound), cumulative))
                total = self.values.get((name, labels, "sum"), 0.0)
                histogram.add_metric(list(labels), points, total)
            yield histogram
        pending = GaugeMetricFamily(
            "agentweb_approvals_pending", "Approval requests waiting for a decision."
        )
        pending.add_metric([], float(self.gauges.get("approvals_pending", 0)))
        yield pending
        active = GaugeMetricFamily(
            "agentweb_runs_active", "Runs not yet ended, by status.", labels=["status"]
        )
        for status, count in sorted(self.gauges.get("runs_active", {}).items()):
            active.add_metric([status], float(count))
        yield active


def _bound(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


def exposition(gauges: Mapping[str, Any]) -> bytes:
    """The Prometheus text format of everything above; ``gauges``: the scrape's counts
    from PostgreSQL (``views.database_gauges``)."""
    from prometheus_client import CollectorRegistry, generate_latest

    stored = _redis().hgetall(redis_key())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(stored, gauges))  # type: ignore[arg-type]
    return bytes(generate_latest(registry))
