"""Issue 2's slice end to end: a demo run on a real worker, its events pushed over the
Channels WebSocket (Daphne + channels-redis) complete, in order and exactly once."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
import websockets

from agentweb.runs.models import Run, RunEvent

pytestmark = pytest.mark.e2e


def login(base: str, username: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=10)
    page = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, "login page has no CSRF token"
    response = client.post(
        "/accounts/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token.group(1)},
        headers={"Referer": f"{base}/accounts/login/"},
    )
    assert response.status_code in (200, 302)
    assert "sessionid" in client.cookies
    return client


async def follow(
    base: str, run_id: int, cookie: str, after: int = 0, timeout: float = 60.0
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Collect events until the server says the run is no longer active."""
    url = base.replace("http://", "ws://") + f"/ws/runs/{run_id}/?after={after}"
    events: list[dict[str, Any]] = []
    async with websockets.connect(url, origin=base, additional_headers={"Cookie": cookie}) as ws:
        async with asyncio.timeout(timeout):
            while True:
                message = json.loads(await ws.recv())
                if message["kind"] == "events":
                    events.extend(message["events"])
                elif message["kind"] == "state" and not message["active"]:
                    return events, message


def test_a_demo_run_streams_every_event_once_and_in_order(demo, web, worker) -> None:
    client = login(web, "operator", demo["password"])
    cookie = f"sessionid={client.cookies['sessionid']}"
    csrf = client.cookies["csrftoken"]
    created = client.post(
        "/api/runs",
        json={
            "task": "Is the Rain Jacket (SKU JKT-RAIN-M) in stock? A customer asks when it "
            "will be back."
        },
        headers={"X-CSRFToken": csrf, "Referer": web + "/"},
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    events, state = asyncio.run(follow(web, run_id, cookie))
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    stored = list(RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type"))
    assert [(e["seq"], e["type"]) for e in events] == stored
    assert stored[0][1] == "run_started"
    assert any(t == "tool_call_finished" for _, t in stored)
    run = Run.objects.get(pk=run_id)
    assert state["status"] == run.status
    assert run.status in ("succeeded", "waiting_approval")
    assert all(f'id="event-{e["seq"]}"' in e["html"] for e in events)

    # A client that reconnects with the last seq it saw gets exactly the rest.
    rest, _ = asyncio.run(follow(web, run_id, cookie, after=3))
    assert [e["seq"] for e in rest] == seqs[3:]


def test_the_socket_refuses_strangers(demo, web) -> None:
    async def attempt(headers: dict[str, str], origin: str) -> Any:
        url = web.replace("http://", "ws://") + "/ws/runs/1/"
        try:
            async with websockets.connect(url, origin=origin, additional_headers=headers) as ws:
                return await asyncio.wait_for(ws.recv(), 5)
        except websockets.exceptions.WebSocketException as exc:
            return exc

    anonymous = asyncio.run(attempt({}, web))
    assert isinstance(anonymous, websockets.exceptions.WebSocketException)
    client = login(web, "operator", demo["password"])
    cookie = {"Cookie": f"sessionid={client.cookies['sessionid']}"}
    foreign = asyncio.run(attempt(cookie, "http://evil.example.com"))
    assert isinstance(foreign, websockets.exceptions.WebSocketException)
