"""Where a tool call runs: in the shared pool (its timeout watched), or, for a lone call of
a tool that has always been quick, in the caller's thread (a hand-off to a thread and
back costs more than such a call)."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from agentweb.runtime import ToolContext, execution, tool
from agentweb.runtime.execution import QUICK_RUNS, Invocation, run_tools

WHERE: list[str] = []
MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="caller's")


def _where() -> str:
    WHERE.append(threading.current_thread().name)
    MARK.set("the tool's")
    return "here"


@pytest.fixture(autouse=True)
def _no_hooks(monkeypatch):
    """As when the runtime is used alone (the Django side registers hooks at start)."""
    monkeypatch.setattr(execution, "_BEFORE", [])
    monkeypatch.setattr(execution, "_AFTER", [])
    monkeypatch.setattr(execution, "_EVERY_CALL", [])


def _fresh(fn=_where, **kw):
    WHERE.clear()
    return tool(fn, name=f"t{id(fn)}_{len(kw)}", **kw)


def _call(t, timeout=5.0):
    return run_tools([Invocation(t, t.parse({}), ToolContext(call_id="c"), timeout)])[0]


def test_a_quick_tool_runs_in_the_pool_until_it_has_been_quick_then_in_the_callers_thread():
    t = _fresh()
    for _ in range(QUICK_RUNS):
        assert _call(t).result == "here"
    assert all(name.startswith("agentweb-tool") for name in WHERE)
    for _ in range(20):  # a pool call slowed over QUICK_MS by a busy machine does not count
        if t._pace >= QUICK_RUNS:
            break
        _call(t)
    WHERE.clear()
    assert _call(t).result == "here"
    assert [threading.current_thread().name] == WHERE
    assert MARK.get() == "caller's"  # the call ran in a copy of the caller's context


def test_a_slow_call_sends_the_tool_back_to_the_pool_for_good(monkeypatch):
    monkeypatch.setattr(execution, "SLOW_MS", 20.0)
    delay = [0.0]

    def sometimes_slow() -> str:
        WHERE.append(threading.current_thread().name)
        time.sleep(delay[0])
        return "done"

    t = _fresh(sometimes_slow)
    t._pace = QUICK_RUNS  # it has been quick
    delay[0] = 0.05
    _call(t)  # in the caller's thread, and too long
    assert [threading.current_thread().name] == WHERE and t._pace == -1
    delay[0] = 0.0
    for _ in range(QUICK_RUNS + 2):
        _call(t)
    assert all(name.startswith("agentweb-tool") for name in WHERE[1:])


def test_only_the_pool_cuts_a_call_at_its_timeout():
    t = _fresh(lambda: time.sleep(0.3) or "late")
    result = _call(t, timeout=0.05)
    assert not result.ok and "timed out after 0.05s" in (result.error or "")
    assert t._pace == 0  # not quick: it stays in the pool, where its timeout is watched


def test_with_hooks_around_tool_calls_every_call_runs_in_the_pool():
    after: list[str] = []
    execution.around_tool_calls(after=lambda: after.append("tidied"))
    t = _fresh()
    t._pace = QUICK_RUNS
    _call(t)
    assert WHERE[0].startswith("agentweb-tool") and after == ["tidied"]


def test_hooks_for_the_pool_only_leave_a_quick_tool_in_the_callers_thread_without_them():
    around: list[str] = []
    execution.around_tool_calls(
        before=lambda: around.append(f"before in {threading.current_thread().name}"),
        after=lambda: around.append(f"after in {threading.current_thread().name}"),
        pool_only=True,
    )
    t = _fresh()
    _call(t)  # not quick yet: in the pool, with the hooks around it
    pool_thread = WHERE[0]
    assert pool_thread.startswith("agentweb-tool")
    assert around == [f"before in {pool_thread}", f"after in {pool_thread}"]
    t._pace = QUICK_RUNS
    around.clear()
    WHERE.clear()
    _call(t)
    assert [threading.current_thread().name] == WHERE and around == []


def test_calls_of_one_turn_go_to_the_pool_together_even_when_quick():
    t = _fresh()
    t._pace = QUICK_RUNS
    inv = Invocation(t, t.parse({}), ToolContext(call_id="c"), 5.0)
    assert [r.result for r in run_tools([inv, inv])] == ["here", "here"]
    assert all(name.startswith("agentweb-tool") for name in WHERE)


def test_an_async_tool_always_runs_in_the_pool():
    async def coro() -> str:
        WHERE.append(threading.current_thread().name)
        return "awaited"

    t = _fresh(coro)
    t._pace = QUICK_RUNS
    assert _call(t).result == "awaited" and WHERE[0].startswith("agentweb-tool")
