"""The intake lane (agentweb/intake_lane.py): requests that start runs take turns in the
web process; a person's request does not wait behind them. Driven as Daphne drives an ASGI
app: messages from an asyncio queue, the app awaited per request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentweb.intake_lane import IntakeLane, is_decision, is_intake


def scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "headers": []}


class Held:
    """An inner app that holds each request until told, noting who is inside."""

    def __init__(self) -> None:
        self.inside: set[str] = set()
        self.entered: list[str] = []
        self.most_intake_inside = 0
        self.release: dict[str, asyncio.Event] = {}
        self.received: dict[str, list[dict[str, Any]]] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        name = dict(scope["headers"]).get(b"x-name", b"?").decode()
        self.entered.append(name)
        self.inside.add(name)
        self.most_intake_inside = max(
            self.most_intake_inside, sum(1 for n in self.inside if n.startswith("intake"))
        )
        got = self.received.setdefault(name, [])
        while True:  # read the body as Django does
            message = await receive()
            got.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        await self.release.setdefault(name, asyncio.Event()).wait()
        self.inside.discard(name)
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def request(
    lane: IntakeLane, method: str, path: str, name: str, bodies: list[bytes] | None = None
) -> tuple[asyncio.Task[None], asyncio.Queue[dict[str, Any]], list[dict[str, Any]]]:
    """One request: its task, its receive queue (the body already in it), what it sent."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    chunks = bodies or [b"{}"]
    for i, chunk in enumerate(chunks):
        inbox.put_nowait({"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1})
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    req = scope(method, path)
    req["headers"] = [(b"x-name", name.encode())]
    return asyncio.ensure_future(lane(req, inbox.get, send)), inbox, sent


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_which_requests_are_intake_and_which_decisions() -> None:
    assert is_intake(scope("POST", "/api/runs"))
    assert is_intake(scope("POST", "/hooks/tickets/zendesk"))
    assert not is_intake(scope("GET", "/api/runs"))
    assert not is_intake(scope("POST", "/api/approvals/3/decide"))
    assert not is_intake(scope("POST", "/api/runs/3/cancel"))
    assert not is_intake(scope("POST", "/hooks/slack/interactions"))
    assert not is_intake({"type": "websocket", "path": "/api/runs"})
    for path in ("/api/approvals/3/decide", "/approvals/12/decide/", "/hooks/slack/interactions"):
        assert is_decision(scope("POST", path)), path
    assert not is_decision(scope("GET", "/approvals/12/decide/"))
    assert not is_decision(scope("POST", "/api/approvals/x/decide"))
    assert not is_decision(scope("POST", "/api/approvals/3/decide/more"))


def test_intake_takes_turns_and_a_decision_goes_straight_in() -> None:
    async def main() -> None:
        inner = Held()
        lane = IntakeLane(inner, at_once=1)
        intake = [request(lane, "POST", "/api/runs", f"intake{i}") for i in range(4)]
        await settle()
        assert inner.entered == ["intake0"]  # the others wait their turn
        decide, _, decide_sent = request(lane, "POST", "/api/approvals/1/decide", "decide")
        await settle()
        assert inner.entered == ["intake0", "decide"]  # not behind the three waiting
        inner.release.setdefault("decide", asyncio.Event()).set()
        await decide
        assert decide_sent[0]["status"] == 201
        for i in range(4):  # each in turn, every one served
            inner.release.setdefault(f"intake{i}", asyncio.Event()).set()
            await intake[i][0]
            assert intake[i][2][0]["status"] == 201
        assert sorted(inner.entered) == sorted(["decide"] + [f"intake{i}" for i in range(4)])
        assert inner.most_intake_inside == 1

    asyncio.run(main())


def test_no_intake_enters_while_a_decision_is_inside() -> None:
    async def main() -> None:
        inner = Held()
        lane = IntakeLane(inner, at_once=1)
        decide, _, _ = request(lane, "POST", "/api/approvals/1/decide", "decide")
        await settle()
        intake = [request(lane, "POST", "/api/runs", f"intake{i}") for i in range(2)]
        slack, _, _ = request(lane, "POST", "/hooks/slack/interactions", "slack")
        await settle()
        assert inner.entered == ["decide", "slack"]  # decisions never wait; intake does
        inner.release.setdefault("decide", asyncio.Event()).set()
        await decide
        await settle()
        assert "intake0" not in inner.entered  # one decision is still inside
        inner.release.setdefault("slack", asyncio.Event()).set()
        await slack
        await settle()
        assert inner.entered == ["decide", "slack", "intake0"]  # in arrival order, one
        for i in range(2):
            inner.release.setdefault(f"intake{i}", asyncio.Event()).set()
            await intake[i][0]
        assert inner.entered[-1] == "intake1" and inner.most_intake_inside == 1
        assert lane.turns().inside == 0 and lane.turns().deciding == 0

    asyncio.run(main())


def test_two_at_once_when_configured() -> None:
    async def main() -> None:
        inner = Held()
        lane = IntakeLane(inner, at_once=2)
        tasks = [request(lane, "POST", "/hooks/tickets/x", f"intake{i}") for i in range(3)]
        await settle()
        assert sorted(inner.entered) == ["intake0", "intake1"]
        for i in range(3):
            inner.release.setdefault(f"intake{i}", asyncio.Event()).set()
        await asyncio.gather(*(t for t, _, _ in tasks))
        assert inner.most_intake_inside == 2

    asyncio.run(main())


def test_the_body_read_while_waiting_reaches_the_app_whole_and_in_order() -> None:
    async def main() -> None:
        inner = Held()
        lane = IntakeLane(inner, at_once=1)
        first, _, _ = request(lane, "POST", "/api/runs", "intake0")
        await settle()
        second, inbox, _ = request(
            lane, "POST", "/api/runs", "intake1", bodies=[b'{"task": ', b'"Check', b' A1"}']
        )
        await settle()
        assert inbox.empty()  # read ahead while it waited
        inner.release.setdefault("intake0", asyncio.Event()).set()
        inner.release.setdefault("intake1", asyncio.Event()).set()
        await first
        await second
        got = inner.received["intake1"]
        assert b"".join(m["body"] for m in got) == b'{"task": "Check A1"}'
        assert [m["more_body"] for m in got] == [True, True, False]

    asyncio.run(main())


def test_a_client_that_leaves_while_waiting_never_reaches_the_app() -> None:
    async def main() -> None:
        inner = Held()
        lane = IntakeLane(inner, at_once=1)
        first, _, _ = request(lane, "POST", "/api/runs", "intake0")
        await settle()
        gone, inbox, gone_sent = request(lane, "POST", "/api/runs", "gone")
        await settle()
        inbox.put_nowait({"type": "http.disconnect"})
        await gone  # ends without a turn
        assert "gone" not in inner.entered and gone_sent == []
        inner.release.setdefault("intake0", asyncio.Event()).set()
        await first
        # Its turn was not kept: the next one goes in at once.
        nxt, _, nxt_sent = request(lane, "POST", "/api/runs", "next")
        await settle()
        assert inner.entered == ["intake0", "next"]
        inner.release.setdefault("next", asyncio.Event()).set()
        await nxt
        assert nxt_sent[0]["status"] == 201

    asyncio.run(main())


def test_a_waiting_request_cancelled_keeps_no_turn() -> None:
    async def main() -> None:
        inner = Held()
        lane = IntakeLane(inner, at_once=1)
        first, _, _ = request(lane, "POST", "/api/runs", "intake0")
        await settle()
        waiting, _, _ = request(lane, "POST", "/api/runs", "cancelled")
        await settle()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        inner.release.setdefault("intake0", asyncio.Event()).set()
        await first
        assert lane.turns().inside == 0 and lane.turns().free()
        assert "cancelled" not in inner.entered

    asyncio.run(main())


def test_the_asgi_application_puts_http_through_the_lane() -> None:
    from agentweb import asgi

    http = asgi.application.application_mapping["http"]
    assert isinstance(http, IntakeLane)
    assert http.app is asgi.django_asgi_app
