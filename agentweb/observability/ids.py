"""Trace and span ids as W3C/OpenTelemetry hex strings (lowercase, never all zeros)."""

from __future__ import annotations

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
