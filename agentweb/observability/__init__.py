"""Observability (README, Observability): OpenTelemetry traces, Prometheus metrics, JSON logs.

Spans and metrics are derived from the events the engine already stores: the store hands
each stored batch to ``steps.record`` (a step hook, ``agentweb.runs.hooks``) after the
transaction commits. The
runtime's hot path is untouched; without ``OTEL_EXPORTER_OTLP_ENDPOINT`` the SDK is never
imported.
"""
