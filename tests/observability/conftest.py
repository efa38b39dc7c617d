from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.runs.conftest import enqueued, people, sample_registry, scripted
from tests.runs.test_delegation import _close_pool_connections, models, team

__all__ = [
    "_close_pool_connections",
    "enqueued",
    "models",
    "people",
    "sample_registry",
    "scripted",
    "team",
]


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
