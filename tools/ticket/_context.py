"""How the ticket tools read the runtime's ToolContext."""

from __future__ import annotations

from typing import ParamSpec, TypeVar

from agentweb.runtime.tools import ToolContext

P = ParamSpec("P")
R = TypeVar("R")


def idempotency_key(ctx: ToolContext | None) -> str | None:
    """The key a write is recorded under: the call id, scoped by the run.

    Providers (and the demo model) only promise call ids unique within a run, so the
    run id keeps two runs' calls apart.
    """
    if ctx is None or not ctx.call_id:
        return None
    return f"{ctx.run_id}:{ctx.call_id}" if ctx.run_id else ctx.call_id


def author(ctx: ToolContext | None) -> str:
    who = "assistant"
    if ctx is not None and ctx.run_id:
        who += f" (run {ctx.run_id})"
    return who[:60]
