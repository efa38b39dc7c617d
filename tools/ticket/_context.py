"""How the ticket tools read the runtime's ToolContext."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import connection

from agentweb.runtime.tools import ToolContext

P = ParamSpec("P")
R = TypeVar("R")


def fresh_db(fn: Callable[P, R]) -> Callable[P, R]:
    """Give each tool call its own database connection like a request: drop this
    thread's connection first when it is broken or older than CONN_MAX_AGE, and again
    after the call. Tools run in the runtime's long-lived pool threads; with the default
    CONN_MAX_AGE of 0 an idle pool thread holds no connection."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()
        try:
            return fn(*args, **kwargs)
        finally:
            if not connection.in_atomic_block:
                connection.close_if_unusable_or_obsolete()

    return wrapper


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
