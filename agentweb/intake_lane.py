"""The intake lane: requests that start runs wait their turn in the web process.

A burst of machine-sent intake (``POST /api/runs``, helpdesk webhooks on ``/hooks/``) used
to enter Django all at once: every request a thread, all of them taking turns at one
interpreter lock and one event loop. A person's request in between (an approver's
decision, a page) took its turn among them and came back several times slower, though it
needs a few milliseconds. Here at most ``AT_ONCE`` intake requests are inside Django at a
time per web process; the others wait on the event loop, where waiting costs nothing.
Everything else goes straight through.

Serving intake one at a time costs it no throughput: the process does one thing at a
time anyway, and a run's creation is a few short statements (bench_burst: the same runs
per second either way, new runs' creation-to-finish shorter).

A request whose client gives up while it waits (``http.disconnect``) is dropped before
Django sees it: no run is created for an answer nobody will read (a client that retries
would otherwise get the run twice). While it waits, its messages are read ahead and given
to Django in order when its turn comes.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]  # Django's handler types its arguments its own way

#: Intake requests inside Django at once, per web process.
AT_ONCE = 1


def is_intake(scope: Scope) -> bool:
    """A request that starts runs on a machine's behalf."""
    if scope.get("type") != "http" or scope.get("method") != "POST":
        return False
    path = scope.get("path", "")
    return path in ("/api/runs", "/api/runs/") or path.startswith("/hooks/")


class IntakeLane:
    """ASGI middleware: intake requests (``is_intake``) pass ``at_once`` at a time."""

    def __init__(self, app: ASGIApp, at_once: int = AT_ONCE) -> None:
        self.app = app
        self.at_once = at_once
        # One gate per event loop (Daphne has one; tests may run several in turn).
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._gates = weakref.WeakKeyDictionary()

    def gate(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.at_once)
        return gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_intake(scope):
            await self.app(scope, receive, send)
            return
        gate = self.gate()
        if not gate.locked():  # a free turn: nothing to wait for
            async with gate:
                await self.app(scope, receive, send)
            return
        read_ahead: deque[Message] = deque()
        if not await self._wait_turn(gate, receive, read_ahead):
            return  # the client left while it waited
        try:

            async def replay() -> Message:
                return read_ahead.popleft() if read_ahead else await receive()

            await self.app(scope, replay, send)
        finally:
            gate.release()

    async def _wait_turn(
        self, gate: asyncio.Semaphore, receive: Receive, read_ahead: deque[Message]
    ) -> bool:
        """Wait for a turn while reading the request's messages; True with the gate held,
        False (gate not held) once the client disconnected."""

        async def watch() -> None:
            while True:
                message = await receive()
                read_ahead.append(message)
                if message.get("type") == "http.disconnect":
                    return

        watcher = asyncio.ensure_future(watch())
        turn = asyncio.ensure_future(gate.acquire())
        try:
            await asyncio.wait((watcher, turn), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled while waiting: give back a turn it may have
            watcher.cancel()
            turn.cancel()
            if turn.done() and not turn.cancelled():
                gate.release()
            raise
        if watcher.done() and watcher.exception() is not None:
            turn.cancel()
            if turn.done() and not turn.cancelled():
                gate.release()
            raise watcher.exception()  # type: ignore[misc]
        if turn.done():
            if not watcher.done():
                watcher.cancel()  # receive() is a queue's get: cancelling it loses nothing
            return True
        # The client left first.
        turn.cancel()
        try:
            await turn
        except asyncio.CancelledError:
            return False
        gate.release()  # the turn came at the same moment: give it back
        return False
