"""The intake lane: requests that start runs wait their turn in the web process, and a
person's decision goes before them.

A burst of machine-sent intake (``POST /api/runs``, a helpdesk's ticket webhooks under
``/hooks/tickets/``) used to enter Django all at once: every request a thread, all of them
taking turns at one interpreter lock and one event loop. An approver's decision in between
took its turn among them and came back several times slower, though it needs a few
milliseconds. Here at most ``AT_ONCE`` intake requests are inside Django at a time per web
process, and none enters while a decision is inside (``POST .../approvals/<id>/decide``,
the page's and the API's, and Slack's buttons): the others wait on the event loop, where
waiting costs nothing. Everything else goes straight through, decisions included.

Serving intake one at a time costs it no throughput: the process does one thing at a
time anyway, and a run's creation is a few short statements (bench_burst: the same runs
per second either way, new runs' creation-to-finish shorter). Decisions are short and
few, so holding intake for them cannot starve it.

A request whose client gives up while it waits (``http.disconnect``) is dropped before
Django sees it: no run is created for an answer nobody will read (a client that retries
would otherwise get the run twice). While it waits, its messages are read ahead and given
to Django in order when its turn comes.
"""

from __future__ import annotations

import asyncio
import re
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

_DECISION = re.compile(r"/(api/)?approvals/[0-9]+/decide/?|/hooks/slack/interactions/?")


def _posted_to(scope: Scope) -> str | None:
    """The path of an HTTP POST; None for anything else."""
    if scope.get("type") != "http" or scope.get("method") != "POST":
        return None
    return str(scope.get("path", ""))


def is_intake(scope: Scope) -> bool:
    """A request that starts runs on a machine's behalf."""
    path = _posted_to(scope)
    return path is not None and (
        path in ("/api/runs", "/api/runs/") or path.startswith("/hooks/tickets/")
    )


def is_decision(scope: Scope) -> bool:
    """A person's decision on an approval (the page, the API, Slack's buttons)."""
    path = _posted_to(scope)
    return path is not None and _DECISION.fullmatch(path) is not None


class Turns:
    """Who may enter Django from the intake lane, on one event loop: a turn is free while
    fewer than ``at_once`` intake requests are inside and no decision is. Turns are given
    in arrival order."""

    def __init__(self, at_once: int) -> None:
        self.at_once = at_once
        self.inside = 0  # intake requests inside Django
        self.deciding = 0  # decisions inside Django
        self._waiting: deque[asyncio.Future[None]] = deque()

    def free(self) -> bool:
        return self.inside < self.at_once and self.deciding == 0

    def try_take(self) -> bool:
        """Take a turn if one is free and nobody waits for it."""
        if self._waiting or not self.free():
            return False
        self.inside += 1
        return True

    async def take(self) -> None:
        """Wait for a turn and hold it (``give_back`` when done)."""
        if self.try_take():
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await turn  # resolved by _hand_out, which counted it inside
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.give_back()  # it came as the wait was cancelled
            else:
                self._waiting.remove(turn)
            raise

    def give_back(self) -> None:
        self.inside -= 1
        self._hand_out()

    def decision_in(self) -> None:
        self.deciding += 1

    def decision_out(self) -> None:
        self.deciding -= 1
        self._hand_out()

    def _hand_out(self) -> None:
        while self._waiting and self.free():
            turn = self._waiting.popleft()
            if not turn.done():
                self.inside += 1
                turn.set_result(None)


class IntakeLane:
    """ASGI middleware: intake requests (``is_intake``) pass ``at_once`` at a time and
    never beside a decision (``is_decision``)."""

    def __init__(self, app: ASGIApp, at_once: int = AT_ONCE) -> None:
        self.app = app
        self.at_once = at_once
        # One set of turns per event loop (Daphne has one; tests may run several in turn).
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Turns]
        self._turns = weakref.WeakKeyDictionary()

    def turns(self) -> Turns:
        loop = asyncio.get_running_loop()
        turns = self._turns.get(loop)
        if turns is None:
            turns = self._turns[loop] = Turns(self.at_once)
        return turns

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_decision(scope):
            turns = self.turns()
            turns.decision_in()
            try:
                await self.app(scope, receive, send)
            finally:
                turns.decision_out()
            return
        if not is_intake(scope):
            await self.app(scope, receive, send)
            return
        turns = self.turns()
        read_ahead: deque[Message] = deque()
        if not await self._wait_turn(turns, receive, read_ahead):
            return  # the client left while it waited
        try:

            async def replay() -> Message:
                return read_ahead.popleft() if read_ahead else await receive()

            await self.app(scope, replay, send)
        finally:
            turns.give_back()

    async def _wait_turn(self, turns: Turns, receive: Receive, read_ahead: deque[Message]) -> bool:
        """Wait for a turn while reading the request's messages; True with the turn held,
        False (no turn held) once the client disconnected."""
        if turns.try_take():
            return True

        async def watch() -> None:
            while True:
                message = await receive()
                read_ahead.append(message)
                if message.get("type") == "http.disconnect":
                    return

        turn = asyncio.ensure_future(turns.take())
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait((watcher, turn), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled while waiting: keep no turn
            watcher.cancel()
            await _drop(turn, turns)
            raise
        if turn.done():
            if not watcher.done():
                watcher.cancel()  # receive() is a queue's get: cancelling it loses nothing
            return True
        await _drop(turn, turns)  # the client left first (or receive() failed)
        if watcher.exception() is not None:
            raise watcher.exception()  # type: ignore[misc]
        return False


async def _drop(turn: asyncio.Future[None], turns: Turns) -> None:
    """Stop waiting for ``turn``; a turn that came meanwhile is given back."""
    if not turn.done():
        turn.cancel()
        try:
            await turn
        except asyncio.CancelledError:
            return  # ``take`` let go of its place (or of the turn that came)
    if not turn.cancelled():
        turns.give_back()
