"""Observability (README, Observability): OpenTelemetry traces, Prometheus metrics, JSON logs.

Spans and metrics are derived from the events the engine already stores, at the one place
where events are stored (``actions.append_events``), after the transaction commits. The
runtime's hot path is untouched; without ``OTEL_EXPORTER_OTLP_ENDPOINT`` the SDK is never
imported.
"""
