"""OpenTelemetry traces of runs, derived from the stored events (README, Observability).

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set;
otherwise ``enabled()`` is False and the SDK is never imported. Everything else is the
SDK's own reading of the standard variables: ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_TRACES_SAMPLER`` (+
``_ARG``), ``OTEL_BSP_*``, ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` … The exporter is OTLP over
HTTP/protobuf.

One run is one trace. Its ids are stored with the run (``Run.trace_id``,
``Run.trace_span_id``): every span is created with that parent context, in whichever
process stored the events, so pauses, resumes and other workers add to the same trace.
The root span ``invoke_agent <profile>`` (with the stored span id) covers the run from its
start to its end and is exported when the run ends; its children are exported as their
steps are stored:

- ``chat <model>`` per model call, ``execute_tool <name>`` per tool call: placed on the
  clock backwards from the moment the step was stored, from the latencies and durations
  the events carry (tools of one turn run concurrently, after the model call);
- ``await_approval <tool>`` from the approval request to the decision (stored by the
  deciding process); the tool's span follows it in the resumed step;
- a child run (delegation) is in its parent's trace: its root span's parent is the span of
  the ``delegate_task`` call that created it (tool spans' ids derive from the call id).

Message content (prompt, completion, tool arguments and results) is recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentweb.observability.ids import tool_span_id
from agentweb.observability.logs import process_kind
from agentweb.runs.hooks import StoredStep
from agentweb.runtime import events as ev

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Tracer

log = logging.getLogger(__name__)

SCOPE = "agentweb"
_TRUE = {"1", "true", "yes", "on"}


def _exporters(env: Mapping[str, str]) -> set[str]:
    names = env.get("OTEL_TRACES_EXPORTER", "otlp") or "otlp"
    return {name.strip().lower() for name in names.split(",") if name.strip()}


def configured(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint (or
    ``OTEL_TRACES_EXPORTER=console``), unless ``OTEL_SDK_DISABLED`` or the exporter
    ``none``."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    exporters = _exporters(env)
    if "none" in exporters:
        return False
    endpoint = bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )
    return "console" in exporters or ("otlp" in exporters and endpoint)


def capture_content(env: Mapping[str, str] = os.environ) -> bool:
    value = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return enabled() and value.strip().lower() in _TRUE


class _Tracing:
    def __init__(self) -> None:
        self.enabled = configured()
        self.lock = threading.Lock()
        self.provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        self.pid = 0


_state = _Tracing()
_forced = threading.local()  # ids the next span must take (the run's stored root span)


def enabled() -> bool:
    return _state.enabled


def _make_provider(processor: SpanProcessor | None = None) -> TracerProvider:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class StoredIds(RandomIdGenerator):
        """Random ids, except for the root span of a run, whose ids were stored."""

        def generate_trace_id(self) -> int:
            forced = getattr(_forced, "trace_id", None)
            return forced if forced is not None else super().generate_trace_id()

        def generate_span_id(self) -> int:
            forced = getattr(_forced, "span_id", None)
            return forced if forced is not None else super().generate_span_id()

    resource = Resource.create({"agentweb.process": process_kind()})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "agentweb"}))
    provider = TracerProvider(resource=resource, id_generator=StoredIds())
    if processor is not None:
        provider.add_span_processor(processor)
        return provider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = _exporters(os.environ)
    if "otlp" in exporters:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        protocol = os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
        )
        if protocol.strip().startswith("grpc"):
            log.warning("OTLP over gRPC is not installed; traces are sent over HTTP/protobuf")
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if "console" in exporters:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return provider


def _tracer() -> Tracer:
    with _state.lock:
        if _state.tracer is None or _state.pid != os.getpid():
            _state.provider = _make_provider()
            _state.tracer = _state.provider.get_tracer(SCOPE)
            _state.pid = os.getpid()
        return _state.tracer


def use_processor(processor: SpanProcessor) -> TracerProvider:
    """Send spans to ``processor`` (tests: an in-memory exporter) and switch tracing on."""
    provider = _make_provider(processor)
    with _state.lock:
        _state.provider, _state.tracer = provider, provider.get_tracer(SCOPE)
        _state.pid, _state.enabled = os.getpid(), True
    return provider


def reset() -> None:
    """Back to what the environment says (tests)."""
    with _state.lock:
        _state.provider, _state.tracer, _state.pid = None, None, 0
        _state.enabled = configured()


def traceparent(trace_id: str, span_id: str) -> str:
    """The W3C ``traceparent`` header for a run's root span (for outgoing calls)."""
    return f"00-{trace_id}-{span_id}-01"


# --- spans from a stored step -----------------------------------------------------------


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _provider_and_model(spec: str) -> tuple[str, str]:
    provider, sep, model = spec.partition(":")
    return (provider, model) if sep else ("agentweb", spec or "unknown")


def _flags(step: StoredStep) -> Any:
    from opentelemetry import trace

    sampled = _trace_sampled(_tracer(), step.trace_id)
    return trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)


def _parent(step: StoredStep) -> Any:
    """Context whose current span is the run's root span (a remote parent)."""
    from opentelemetry import trace

    trace_id, span_id = int(step.trace_id, 16), int(step.span_id, 16)
    root = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=_flags(step))
    return trace.set_span_in_context(trace.NonRecordingSpan(root))


def _root_context(step: StoredStep) -> Any:
    """Parent context of the root span: none, or the delegating call's span (a child)."""
    from opentelemetry import trace

    if not step.parent_span_id:
        return None
    parent = trace.SpanContext(
        int(step.trace_id, 16),
        int(step.parent_span_id, 16),
        is_remote=True,
        trace_flags=_flags(step),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def _trace_sampled(tracer: Tracer, trace_id: str) -> bool:
    """The sampler's decision for the trace's top root span, made again wherever a span
    of it is created: the standard samplers decide on the trace id alone, so every
    process agrees and a run tree's spans are kept or dropped together."""
    sampler = getattr(tracer, "sampler", None)
    if sampler is None:
        return True
    result = sampler.should_sample(None, int(trace_id, 16), "invoke_agent")
    return bool(result.decision.is_sampled())


def record(step: StoredStep) -> None:
    """Export the spans a stored batch of events describes."""
    tracer = _tracer()
    parent = _parent(step)
    capture = capture_content()
    provider, _ = _provider_and_model(step.model)
    cursor = step.stored_ns
    events = step.typed_events()
    for phase in reversed(_phases(events)):
        match phase:
            case [ev.ModelCalled() as called]:
                end = cursor
                start = end - int(float(called.latency_ms or 0) * 1_000_000)
                _chat_span(tracer, parent, step, called, provider, start, end, capture)
                cursor = start
            case tools:
                cursor = _tool_spans(tracer, parent, step.trace_id, tools, cursor, capture)
    decided_calls = {e.call_id: e for e in events if isinstance(e, ev.ApprovalDecided)}
    for call_id, (requested, decided) in step.approval_times().items():
        decision = decided_calls.get(call_id)
        if decision is None:  # its event does not fit its type (logged)
            continue
        tool = decision.tool or ""
        span = tracer.start_span(
            f"await_approval {tool}",
            context=parent,
            start_time=_ns(requested),
            attributes={
                "gen_ai.operation.name": "await_approval",
                "gen_ai.tool.name": str(tool),
                "gen_ai.tool.call.id": str(call_id),
                "agentweb.run.id": step.run_id,
                "agentweb.approval.decision": str(decision.decision or ""),
                "agentweb.approval.edited": bool(decision.edited),
            },
        )
        span.end(end_time=_ns(decided) if decided else step.stored_ns)
    status = step.final_status
    if status is not None:
        _root_span(tracer, step, status, provider)


ToolEvent = ev.ToolCallStarted | ev.ToolCallFinished


def _phases(events: list[ev.Event]) -> list[list[Any]]:
    """Consecutive tool events form one concurrent group; each model call is its own
    (``[ModelCalled]``)."""
    phases: list[list[Any]] = []
    tools: list[ToolEvent] | None = None
    for event in events:
        if isinstance(event, ev.ModelCalled):
            phases.append([event])
            tools = None
        elif isinstance(event, ToolEvent):
            if tools is None:
                tools = []
                phases.append(tools)
            tools.append(event)
    return phases


def _chat_span(
    tracer: Tracer,
    parent: Any,
    step: StoredStep,
    called: ev.ModelCalled,
    provider: str,
    start: int,
    end: int,
    capture: bool,
) -> None:
    from opentelemetry.trace import SpanKind

    _, requested = _provider_and_model(step.model)
    tokens = called.tokens or {}
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": requested,
        "gen_ai.response.model": str(called.model or requested),
        "gen_ai.usage.input_tokens": int(tokens.get("input") or 0),
        "gen_ai.usage.output_tokens": int(tokens.get("output") or 0),
        "gen_ai.response.finish_reasons": [str(called.finish_reason or "unknown")],
        "agentweb.run.id": step.run_id,
    }
    if called.cost is not None:
        attributes["agentweb.cost_usd"] = float(called.cost)
    if called.iteration is not None:
        attributes["agentweb.iteration"] = int(called.iteration)
    if capture:
        attributes.update(_content(step, called))
    span = tracer.start_span(
        f"chat {requested}",
        context=parent,
        kind=SpanKind.CLIENT,
        start_time=start,
        attributes=attributes,
    )
    span.end(end_time=end)


def _tool_spans(
    tracer: Tracer,
    parent: Any,
    trace_id: str,
    items: list[ToolEvent],
    cursor: int,
    capture: bool,
) -> int:
    from opentelemetry.trace import Status, StatusCode

    started = {e.call_id: e for e in items if isinstance(e, ev.ToolCallStarted)}
    finished = [e for e in items if isinstance(e, ev.ToolCallFinished) and not e.reused]
    if not finished:
        return cursor
    group = max(int(float(e.duration_ms or 0) * 1_000_000) for e in finished)
    start = cursor - group
    for done in finished:
        name = str(done.tool)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": str(done.call_id),
            "gen_ai.tool.type": "function",
        }
        began = started.get(done.call_id)
        if began is not None and began.risk:
            attributes["agentweb.tool.risk"] = str(began.risk)
        if capture:
            attributes["gen_ai.tool.call.arguments"] = _json(
                began.arguments if began is not None else None
            )
            attributes["gen_ai.tool.call.result"] = _json(done.result if done.ok else done.error)
        _forced.span_id = int(tool_span_id(trace_id, str(done.call_id)), 16)
        try:
            span = tracer.start_span(
                f"execute_tool {name}", context=parent, start_time=start, attributes=attributes
            )
        finally:
            _forced.span_id = None
        if not done.ok:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, str(done.error or "")[:500]))
        span.end(end_time=start + int(float(done.duration_ms or 0) * 1_000_000))
    return start


def _root_span(tracer: Tracer, step: StoredStep, status: str, provider: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    _, requested = _provider_and_model(step.model)
    agent = step.agent()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": requested,
        "gen_ai.usage.input_tokens": int(step.usage.get("input_tokens") or 0),
        "gen_ai.usage.output_tokens": int(step.usage.get("output_tokens") or 0),
        "agentweb.run.id": step.run_id,
        "agentweb.run.status": status,
    }
    if step.usage.get("cost_usd") is not None:
        attributes["agentweb.cost_usd"] = float(step.usage["cost_usd"])
    start = _ns(step.started_at or step.created_at)
    _forced.trace_id, _forced.span_id = int(step.trace_id, 16), int(step.span_id, 16)
    try:
        span = tracer.start_span(
            f"invoke_agent {agent}",
            context=_root_context(step),
            start_time=min(start, step.stored_ns),
            attributes=attributes,
        )
    finally:
        _forced.trace_id = _forced.span_id = None
    if status == "failed":
        reason = next((e.reason for e in step.typed_events() if isinstance(e, ev.RunFailed)), "")
        span.set_status(Status(StatusCode.ERROR, str(reason or step.failure_reason)[:500]))
    span.end(end_time=step.stored_ns)


# --- message content (opt-in) -----------------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if message.get("role") == "tool":
        return [
            {
                "type": "tool_call_response",
                "id": message.get("call_id"),
                "response": message.get("content"),
            }
        ]
    if message.get("content"):
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or []:
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": call.get("arguments"),
            }
        )
    return parts


def _content(step: StoredStep, called: ev.ModelCalled) -> dict[str, str]:
    """GenAI content attributes: the stored conversation up to this call (not the
    budgeted window the context policy sent) and the model's reply."""
    output = [
        {
            "role": "assistant",
            "parts": _parts({"content": called.text, "tool_calls": called.tool_calls}),
            "finish_reason": str(called.finish_reason or "unknown"),
        }
    ]
    attributes = {"gen_ai.output.messages": _json(output)}
    messages = list((step.state or {}).get("messages") or [])
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last is not None:
        history = messages[:last]
        system = [m for m in history if m.get("role") == "system"]
        if system:
            attributes["gen_ai.system_instructions"] = _json(
                [{"type": "text", "content": m.get("content")} for m in system]
            )
        attributes["gen_ai.input.messages"] = _json(
            [
                {"role": m.get("role"), "parts": _parts(m)}
                for m in history
                if m.get("role") != "system"
            ]
        )
    return attributes
