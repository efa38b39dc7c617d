"""Trace and span ids as W3C/OpenTelemetry hex strings (lowercase, never all zeros)."""

from __future__ import annotations

import hashlib
import secrets


def new_trace_id() -> str:
    """32 lowercase hex digits (128 bits)."""
    while True:
        value = secrets.token_hex(16)
        if value.strip("0"):
            return value


def new_span_id() -> str:
    """16 lowercase hex digits (64 bits)."""
    while True:
        value = secrets.token_hex(8)
        if value.strip("0"):
            return value


def tool_span_id(trace_id: str, call_id: str) -> str:
    """The span id of a tool call's span, derived from the run's trace and the call id, so
    a child run created by that call (delegation) can name it as its parent before the
    span exists."""
    digest = hashlib.sha256(f"{trace_id}:{call_id}".encode()).hexdigest()
    return digest[:16] if digest[:16].strip("0") else digest[16:32]
