"""Redis outages under a running stack, as a person meets them: runs in flight, a run page
open over its WebSocket, Redis killed -9 and back empty, several times in a row.

The stacks differ (a worker started with the README's command line beside a test web and
beat; `make run` itself); what is checked is the same, DESIGN §5's bar: no worker exits
within 60 s, the open page gets the next event within 5 s and every later one, a run
created during the outage starts within 30 s of Redis's return."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.conftest import wait_for
from tests.fakes.llm_server import Recorded, Reply, oa_call, oa_reply

KILLS = 3
LONG_STEPS = 18  # the followed run's tool calls: it outlives the three outages
FINAL = ("succeeded", "failed", "cancelled")


def script(req: Recorded) -> Reply:
    """Short runs: two model calls of 1.5 s. A run whose task says LONGRUN: LONG_STEPS
    look-ups of 3 s each, then the answer."""
    messages = req.json["messages"]
    done = sum(1 for m in messages if m["role"] == "tool")
    task = next(str(m["content"]) for m in messages if m["role"] == "user")
    steps, delay = (LONG_STEPS, 3.0) if "LONGRUN" in task else (1, 1.5)
    if done < steps:
        call = oa_call(f"c-{done}", "search_kb", {"query": f"damaged item refund {done}"})
        return Reply(delay=delay, json=oa_reply(tool_calls=[call]))
    return Reply(delay=delay, json=oa_reply(content="All done."))


class Follower:
    """A browser's run socket on its own thread: every message with the time it came."""

    def __init__(self, url: str, run_id: int, cookie: str) -> None:
        self.messages: list[tuple[float, dict[str, Any]]] = []
        self.closed: Any = None
        ws_url = url.replace("http://", "ws://") + f"/ws/runs/{run_id}/?after=0"
        headers = {"Cookie": cookie, "Origin": url}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, args=(ws_url, headers), daemon=True)
        self.thread.start()

    def _run(self, ws_url: str, headers: dict[str, str]) -> None:
        self.loop.run_until_complete(self._follow(ws_url, headers))

    async def _follow(self, ws_url: str, headers: dict[str, str]) -> None:
        from websockets.asyncio.client import connect

        try:
            async with connect(ws_url, additional_headers=headers) as ws:
                self.ws = ws
                async for raw in ws:
                    self.messages.append((time.monotonic(), json.loads(raw)))
        except Exception as exc:  # recorded: the test asserts the socket stayed open
            self.closed = exc

    def seqs_after(self, t: float) -> list[int]:
        return [
            e["seq"]
            for at, m in self.messages
            if at >= t and m["kind"] == "events"
            for e in m["events"]
        ]

    def last_seq(self) -> int:
        return max(self.seqs_after(0), default=0)

    def first(self, kind: str, since: float, **match: Any) -> float | None:
        for at, m in self.messages:
            if at >= since and m["kind"] == kind and all(m.get(k) == v for k, v in match.items()):
                return at
        return None

    def stop(self) -> None:
        if hasattr(self, "ws"):
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self.ws.close(), self.loop).result(10)
        self.thread.join(5)


@dataclass
class Stack:
    """How a test reaches its stack."""

    create: Callable[[str], int]  # POST /api/runs (asserts 201), the run's id
    status: Callable[[int], str]
    stored: Callable[[int], int]  # events stored for a run
    kill_redis: Callable[[], None]
    redis_back: Callable[[], None]  # returns once Redis answers again (started empty)
    check_worker: Callable[[], None]  # asserts no worker exited


def follow_a_long_run(stack: Stack, url: str, cookie: str) -> tuple[int, Follower]:
    followed = stack.create("LONGRUN: a look into a damaged item")
    wait_for(lambda: stack.status(followed) == "running", 30)
    follower = Follower(url, followed, cookie)
    wait_for(lambda: follower.first("state", 0), 10)
    return followed, follower


def outages(stack: Stack, followed: int, follower: Follower) -> tuple[list[int], float]:
    """KILLS rounds: runs in flight, Redis killed -9, a run created, Redis back empty.
    Returns the runs created and when Redis was first killed."""
    ids: list[int] = []
    first_kill = 0.0
    for round_ in range(KILLS):
        # A few runs in flight, fewer than the worker's threads: it still polls for more.
        batch = [stack.create(f"Customer {round_}-{i}: item arrived damaged") for i in range(3)]
        ids += batch
        wait_for(lambda b=batch: all(stack.status(r) == "running" for r in b), 30)
        killed = time.monotonic()
        first_kill = first_kill or killed
        stack.kill_redis()

        # While Redis is down a run is still stored and answered 201, quickly.
        started = time.monotonic()
        outage_run = stack.create(f"Created while Redis is down ({round_})")
        assert time.monotonic() - started < 5
        ids.append(outage_run)
        # The open page was told the live feed is interrupted (it shows "reconnecting").
        wait_for(lambda k=killed: follower.first("live", k, ok=False), 5)
        stored_meanwhile = stack.stored(followed)
        stack.redis_back()
        back = time.monotonic()
        # The page is live again within 5 s, and what was stored meanwhile arrives ...
        wait_for(lambda b=back: follower.first("live", b, ok=True), 10)
        resumed = follower.first("live", back, ok=True)
        assert resumed is not None and resumed - back < 5, resumed and resumed - back
        wait_for(lambda n=stored_meanwhile: follower.last_seq() >= n, 5)
        # ... and so does the next event stored after Redis's return, within 5 s of it.
        later = stack.stored(followed) + 1
        wait_for(lambda n=later: stack.stored(followed) >= n, 10)
        stored_at = time.monotonic()
        wait_for(lambda n=later: follower.last_seq() >= n, 5)
        assert time.monotonic() - stored_at < 5
        # The run created during the outage starts within 30 s of Redis's return.
        wait_for(lambda r=outage_run: stack.status(r) != "queued", 30)
        assert time.monotonic() - back < 30
        stack.check_worker()
    return ids, first_kill


def all_done(
    stack: Stack, followed: int, follower: Follower, ids: list[int], first_kill: float
) -> None:
    """Every run succeeded, no worker exited in the 60 s after the first kill, the page got
    every event of its run in order over the one socket it opened."""
    ids = [followed, *ids]
    wait_for(lambda: all(stack.status(r) in FINAL for r in ids), 90, 0.5)
    statuses = {r: stack.status(r) for r in ids}
    assert set(statuses.values()) == {"succeeded"}, statuses
    wait_for(lambda: time.monotonic() - first_kill >= 60, 70, 0.5)
    stack.check_worker()
    after = stack.create("After the restarts")
    wait_for(lambda: stack.status(after) in FINAL, 30)
    assert stack.status(after) == "succeeded"
    total = stack.stored(followed)
    assert total >= 2 * LONG_STEPS, total
    wait_for(lambda: follower.last_seq() >= total, 10)
    assert sorted(set(follower.seqs_after(0))) == list(range(1, total + 1))
    assert follower.closed is None, follower.closed
    follower.stop()
