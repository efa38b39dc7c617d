"""Running tool calls: a long-lived shared thread pool, per-call timeouts, errors turned
into results, and results cut for the model while the full value is kept for the record.
A lone call of a tool that has always been quick runs in the caller's thread."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from pydantic import BaseModel

from .images import Image, ToolOutput
from .tools import Suspend, Tool, ToolContext, ToolError

__all__ = [
    "ToolPool",
    "ToolResult",
    "around_tool_calls",
    "format_for_model",
    "run_tools",
    "shared_pool",
    "to_jsonable",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

POOL_SIZE = 32

#: Called in a pool thread before and after every call it runs (``around_tool_calls``).
_BEFORE: list[Callable[[], None]] = []
_AFTER: list[Callable[[], None]] = []
#: Those of them that must run around every call: while there is one, no call runs in
#: the caller's thread (``_runs_inline``).
_EVERY_CALL: list[Callable[[], None]] = []


def around_tool_calls(
    before: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
    *,
    pool_only: bool = False,
) -> None:
    """Run ``before`` and ``after`` in the tool's thread around every tool call, whatever
    module the tool comes from: the host's way to tidy per-thread resources (the Django
    side hands each thread's database connection back after a call). A hook that raises
    is logged and does not fail the call.

    ``pool_only``: the hooks tidy the pool's own long-lived threads, and a quick tool's
    call run in the caller's thread (``_runs_inline``) goes without them: the caller
    looks after its own resources. Otherwise every call runs in the pool, with them."""
    for hook, hooks in ((before, _BEFORE), (after, _AFTER)):
        if hook is not None and hook not in hooks:
            hooks.append(hook)
            if not pool_only:
                _EVERY_CALL.append(hook)


def _hooks(hooks: list[Callable[[], None]]) -> None:
    for hook in hooks:
        try:
            hook()
        except Exception:
            log.warning("tool-thread hook %r raised", hook, exc_info=True)


class ToolPool:
    """A long-lived pool of daemon threads. Unlike ``ThreadPoolExecutor`` a hung tool
    does not hold up interpreter exit (a worker can always shut down); threads start on
    demand up to ``max_workers`` and are then reused (tools may keep a DB connection
    per thread)."""

    def __init__(self, max_workers: int = POOL_SIZE, name: str = "agentweb-tool") -> None:
        self.max_workers = max(1, max_workers)
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        fut: Future[T] = Future()
        with self._lock:
            if self._idle:  # an idle thread will take it
                self._idle -= 1
            elif self._threads < self.max_workers:
                self._threads += 1
                name = f"{self._name}-{self._threads}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
        # The caller's context variables (a run's log fields) go with the call.
        self._queue.put((fut, partial(contextvars.copy_context().run, fn)))
        return fut

    def _work(self) -> None:
        while True:
            fut, fn = self._queue.get()
            if fut.set_running_or_notify_cancel():
                _hooks(_BEFORE)
                try:
                    fut.set_result(fn())
                except BaseException as exc:
                    fut.set_exception(exc)
                finally:
                    _hooks(_AFTER)
            del fut, fn
            with self._lock:
                self._idle += 1


_POOL: ToolPool | None = None
_POOL_LOCK = threading.Lock()


def shared_pool() -> ToolPool:
    """The process-wide pool tools run in, created once and sized by
    ``AGENTWEB_TOOL_THREADS`` (default 32)."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ToolPool(int(os.environ.get("AGENTWEB_TOOL_THREADS") or POOL_SIZE))
    return _POOL


@dataclass(slots=True)
class ToolResult:
    ok: bool
    result: Any  # JSON-ready value (full)
    error: str | None  # on failure: exactly the text the model receives
    duration_ms: float
    waiting_on: list[Any] | None = None  # the tool raised ``Suspend``: no result yet
    images: list[Image] = field(default_factory=list)


@dataclass(slots=True)
class Invocation:
    tool: Tool
    parsed: BaseModel
    ctx: ToolContext
    timeout: float


def _invoke(inv: Invocation) -> ToolResult:
    started = time.perf_counter()
    try:
        kwargs = inv.tool.call_kwargs(inv.parsed, inv.ctx)
        value = inv.tool.fn(**kwargs)
        if inv.tool.is_async:
            value = asyncio.run(value)
        if isinstance(value, ToolOutput):
            images = list(value.images)
            return ToolResult(
                True, to_jsonable(value.result), None, _elapsed(started), images=images
            )
        return ToolResult(True, to_jsonable(value), None, _elapsed(started))
    except Suspend as exc:
        return ToolResult(False, None, None, _elapsed(started), waiting_on=exc.waiting_on)
    except ToolError as exc:  # the tool's own words for the model, verbatim
        return ToolResult(False, None, str(exc) or type(exc).__name__, _elapsed(started))
    except Exception as exc:
        log.warning("tool %r raised", inv.tool.name, exc_info=True)
        return ToolResult(False, None, error_text(exc), _elapsed(started))


def error_text(exc: BaseException) -> str:
    """What the model receives for an exception other than ``ToolError``."""
    name = type(exc).__name__
    return f"Error: {name}: {exc}" if str(exc) else f"Error: {name}"


def run_tools(invocations: Sequence[Invocation]) -> list[ToolResult]:
    """Run ``invocations`` concurrently in the shared pool; results in the order given.

    One call of a tool that has always been quick runs in the calling thread instead
    (``_runs_inline``): handing a call of a few microseconds to a thread and back costs
    more than the call."""
    if len(invocations) == 1 and _runs_inline(invocations[0].tool):
        inv = invocations[0]
        result = contextvars.copy_context().run(_invoke, inv)
        _paced(inv.tool, result.duration_ms, inline=True)
        return [result]
    pool = shared_pool()
    started = time.perf_counter()
    futures = [pool.submit(partial(_invoke, inv)) for inv in invocations]
    results: list[ToolResult] = []
    for inv, fut in zip(invocations, futures, strict=True):
        remaining = max(0.0, inv.timeout - (time.perf_counter() - started))
        try:
            result = fut.result(timeout=remaining)
        except FutureTimeout:
            fut.cancel()
            msg = f"Error: tool {inv.tool.name!r} timed out after {inv.timeout:g}s"
            result = ToolResult(False, None, msg, _elapsed(started))
        _paced(inv.tool, result.duration_ms)
        results.append(result)
    return results


#: A call at most ``QUICK_MS`` long is quick: a tool with ``QUICK_RUNS`` quick calls in the
#: pool may run in the caller's thread. A call over ``SLOW_MS`` (in the pool or not) keeps
#: the tool in the pool for good: a call that long may be one that hangs, and only in the
#: pool is it cut at its timeout. (Wall time: a call that waits is not quick; a busy
#: machine's preemptions of a few milliseconds leave a quick tool quick.) A few
#: milliseconds: a database read of the ticket tools takes 0.7-1.6 ms in a run, and the
#: hand-off to a pool thread and back cost each about 0.2 ms more (bench_engine).
QUICK_MS = 5.0
QUICK_RUNS = 3
SLOW_MS = 1000.0


def _runs_inline(tool: Tool) -> bool:
    """Whether a lone call of ``tool`` runs in the calling thread: a synchronous tool
    whose calls have been quick (its timeout is then not watched: a call that overstays
    ``SLOW_MS`` sends the tool back to the pool for good), and only when no host asked
    for hooks around every tool call (``around_tool_calls`` without ``pool_only``)."""
    return not tool.is_async and tool._pace >= QUICK_RUNS and not _EVERY_CALL


#: A read-only tool whose last call took at most this long runs in the step of the reply
#: that asked for it (``Turns.reads_now``): its result is stored with the reply, a step
#: (and a transaction) sooner. A slower one keeps its step of its own, so the page shows
#: the reply's call while the call is on its way. Wall time, as a person waits it.
WITH_REPLY_MS = 100.0


def quick_read(tool: Tool) -> bool:
    """Whether ``tool`` is read-only and its last call in this process was quick (a tool
    not called here yet is not)."""
    return tool.read_only and tool._last_ms is not None and tool._last_ms <= WITH_REPLY_MS


def _paced(tool: Tool, duration_ms: float, *, inline: bool = False) -> None:
    """Count a call of ``tool`` towards running it inline (``Tool._pace``: its quick calls
    in the pool so far, or -1 once one was slow) and keep its duration."""
    tool._last_ms = duration_ms
    runs = tool._pace
    if runs < 0:
        return
    if duration_ms > SLOW_MS:
        tool._pace = -1
    elif duration_ms <= QUICK_MS and not inline:
        tool._pace = runs + 1


def _elapsed(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def to_jsonable(value: Any) -> Any:
    """A JSON-ready form of a tool's return value."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        simple = all(v is None or isinstance(v, str | int | float | bool) for v in value.values())
        if simple:
            return value
    return json.loads(json.dumps(value, default=_default, ensure_ascii=False))


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)


#: ``json.dumps(value, ensure_ascii=False)``, its encoder made once.
_UNESCAPED = json.JSONEncoder(ensure_ascii=False).encode


def format_for_model(result: Any, max_chars: int) -> str:
    """The text the model sees; cut with a note when longer than ``max_chars``."""
    text = result if isinstance(result, str) else _UNESCAPED(result)
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    return (
        text[:max_chars] + f"\n…[result cut: showing {max_chars} of {len(text)} characters; "
        "ask for a narrower query if you need the rest]"
    )
