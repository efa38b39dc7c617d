from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.runs.conftest import enqueued, people, sample_registry, scripted

__all__ = ["enqueued", "people", "sample_registry", "scripted"]


@pytest.fixture
def spans() -> Iterator[Any]:
    """Tracing on, into an in-memory exporter (one span processor per 'process')."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentweb.observability import tracing

    exporter = InMemorySpanExporter()
    tracing.use_processor(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.reset()


@pytest.fixture(scope="module", autouse=True)
def _close_pool_connections(django_db_setup: None) -> Iterator[None]:
    """Tools (delegation's among them) run in the runtime's pool threads, which keep a DB
    connection each; close them so the test database can be dropped."""
    yield
    from django.db import connection

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
def team(people: dict[str, Any], monkeypatch: pytest.MonkeyPatch, sample_registry: None) -> Any:
    """Two profiles, each with a scripted model of its own: obs-lead delegates to
    obs-billing. Returns the scripted model of a profile by name."""
    from agentweb.runs import agents
    from agentweb.runs.models import AgentProfile
    from agentweb.runtime.testing import ScriptedModel

    by_spec: dict[str, ScriptedModel] = {}
    monkeypatch.setattr(
        agents, "model_for", lambda spec: by_spec.setdefault(spec, ScriptedModel(name=spec))
    )
    for name, delegates in (("obs-billing", []), ("obs-lead", ["obs-billing"])):
        AgentProfile.objects.create(
            name=name,
            system_prompt=f"You are {name}.",
            model=f"scripted:{name}",
            delegates=delegates,
        )
    return lambda name: by_spec.setdefault(f"scripted:{name}", ScriptedModel(name=name))
