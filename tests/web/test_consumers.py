"""The run WebSocket through the real ASGI stack (origin check, session auth, routing)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client

from agentweb.asgi import application
from agentweb.runs import publish
from agentweb.runs.models import Run
from tests.web import factories as f

pytestmark = pytest.mark.django_db(transaction=True)


def _user(name: str, role: str | None = "operator") -> User:
    from agentweb.accounts.roles import ensure_roles

    groups = ensure_roles()
    user = User.objects.create_user(name, password="pw-123456789")
    if role:
        user.groups.add(groups[role] if role in groups else Group.objects.get(name=role))
    return user


def _cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def communicator(path: str, cookie: str | None, origin: str = "http://localhost") -> Any:
    headers = [(b"origin", origin.encode()), (b"host", b"localhost")]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def receive_until_state(comm: WebsocketCommunicator) -> tuple[list[dict], dict]:
    events: list[dict] = []
    while True:
        msg = await comm.receive_json_from(timeout=5)
        if msg["kind"] == "events":
            events.extend(msg["events"])
        elif msg["kind"] == "state":
            return events, msg


def seqs(events: list[dict]) -> list[int]:
    return [e["seq"] for e in events]


@pytest.fixture
def setup_run() -> dict[str, Any]:
    owner = _user("op1")
    run = f.make_run(owner)
    f.emit(run, {"type": "run_started", "data": {}}, f.model_called(), f.tool_started())
    return {"owner": owner, "run": run, "cookie": _cookie(owner)}


async def test_it_sends_a_snapshot_of_stored_events_on_connect(setup_run: dict) -> None:
    run = setup_run["run"]
    comm = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
    connected, _ = await comm.connect()
    assert connected
    events, state = await receive_until_state(comm)
    assert seqs(events) == [1, 2, 3]
    assert [e["type"] for e in events] == ["run_started", "model_called", "tool_call_started"]
    for event in events:
        assert re.match(rf'<li id="event-{event["seq"]}"', event["html"])
    assert state["status"] == "running" and state["active"] is True
    assert f"Run #{run.pk}" in state["header"]
    await comm.disconnect()


async def test_it_pushes_a_live_event_read_from_the_database(setup_run: dict) -> None:
    run = setup_run["run"]
    comm = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    await sync_to_async(f.emit)(run, f.tool_finished(result={"status": "<b>shipped</b>"}))
    events, _ = await receive_until_state(comm)
    assert seqs(events) == [4]
    assert events[0]["type"] == "tool_call_finished"
    # Tool text is escaped, never markup.
    assert "<b>shipped</b>" not in events[0]["html"]
    assert "&lt;b&gt;shipped&lt;/b&gt;" in events[0]["html"]
    await comm.disconnect()


async def test_it_ignores_the_wake_up_payload_and_never_repeats(setup_run: dict) -> None:
    run = setup_run["run"]
    comm = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    # A forged or repeated wake-up claiming seq 99: nothing new is stored, nothing is sent
    # but the state.
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    await layer.group_send(
        publish.run_group(run.pk), {"type": "run.event", "run": run.pk, "seq": 99}
    )
    events, state = await receive_until_state(comm)
    assert events == []
    assert state["last_seq"] == 3
    await comm.disconnect()


async def test_it_resumes_after_the_clients_last_seq(setup_run: dict) -> None:
    run = setup_run["run"]
    await sync_to_async(f.emit)(run, f.tool_finished(), f.model_called(text="Done."))
    comm = communicator(f"/ws/runs/{run.pk}/?after=3", setup_run["cookie"])
    assert (await comm.connect())[0]
    events, _ = await receive_until_state(comm)
    assert seqs(events) == [4, 5]
    await comm.disconnect()


async def test_it_resends_on_a_resync_request(setup_run: dict) -> None:
    run = setup_run["run"]
    comm = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    await comm.send_json_to({"kind": "resync", "after": 1})
    events, _ = await receive_until_state(comm)
    assert seqs(events) == [2, 3]
    await comm.disconnect()


async def test_it_forwards_streamed_text_as_a_delta(setup_run: dict) -> None:
    run = setup_run["run"]
    comm = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    from channels.layers import get_channel_layer

    await get_channel_layer().group_send(
        publish.run_group(run.pk),
        {"type": "run.delta", "offset": 0, "text": "<script>x</script>Hel"},
    )
    msg = await comm.receive_json_from(timeout=5)
    # the client uses textContent
    assert msg == {"kind": "delta", "offset": 0, "text": "<script>x</script>Hel"}
    await comm.disconnect()


def test_the_engine_sends_each_character_of_a_reply_once() -> None:
    """A 24 KB answer streamed in 8-character chunks: the old publisher sent the whole text
    so far each time (quadratic); deltas add up to the reply itself."""
    from unittest import mock

    from agentweb.runs import engine

    sent: list[dict] = []
    with mock.patch.object(publish, "send_now", lambda group, message: sent.append(message)):
        deltas = engine._DeltaPublisher(7, interval=0.0)
        reply = "".join(f"{i:07d}." for i in range(3000))  # 24,000 characters
        for i in range(0, len(reply), 8):
            deltas(reply[i : i + 8])
    assert "".join(m["text"] for m in sent) == reply
    assert sum(len(m["text"]) for m in sent) == len(reply)
    offsets = [m["offset"] for m in sent]
    assert offsets == sorted(offsets) and offsets[0] == 0


def test_a_reply_streamed_faster_than_the_interval_sends_no_preview() -> None:
    """Its stored event follows within milliseconds; a reply still streaming after the
    interval shows everything so far, then what came since."""
    from unittest import mock

    from agentweb.runs import engine

    sent: list[dict] = []
    with mock.patch.object(publish, "send_now", lambda group, message: sent.append(message)):
        quick = engine._DeltaPublisher(7, interval=0.2)
        for piece in ("Order ", "A1001 ", "is on record."):
            quick(piece)
        assert sent == []
        slow = engine._DeltaPublisher(7, interval=0.05)
        slow("Hel")
        time.sleep(0.06)  # a model that takes its time
        slow("lo")
        time.sleep(0.06)
        slow(" there")
    assert sent == [
        {"type": "run.delta", "offset": 0, "text": "Hello"},
        {"type": "run.delta", "offset": 5, "text": " there"},
    ]


async def test_it_refuses_anonymous_connections(setup_run: dict) -> None:
    comm = communicator(f"/ws/runs/{setup_run['run'].pk}/", None)
    connected, code = await comm.connect()
    assert not connected
    await comm.disconnect()


async def test_it_refuses_a_foreign_origin(setup_run: dict) -> None:
    comm = communicator(
        f"/ws/runs/{setup_run['run'].pk}/", setup_run["cookie"], origin="http://evil.example"
    )
    connected, _ = await comm.connect()
    assert not connected
    await comm.disconnect()


async def test_it_refuses_a_run_the_user_may_not_see(setup_run: dict) -> None:
    outsider = await sync_to_async(_user)("nobody", role=None)
    cookie = await sync_to_async(_cookie)(outsider)
    comm = communicator(f"/ws/runs/{setup_run['run'].pk}/", cookie)
    connected, _ = await comm.connect()
    assert not connected
    await comm.disconnect()


async def test_it_refuses_a_run_that_does_not_exist(setup_run: dict) -> None:
    comm = communicator("/ws/runs/999999/", setup_run["cookie"])
    connected, _ = await comm.connect()
    assert not connected
    await comm.disconnect()


async def test_it_shows_approval_controls_only_to_those_who_may_decide(setup_run: dict) -> None:
    run = setup_run["run"]
    await sync_to_async(f.request_approval)(run)
    approver = await sync_to_async(_user)("appr", role="approver")
    for cookie, can in (
        (setup_run["cookie"], False),
        (await sync_to_async(_cookie)(approver), True),
    ):
        comm = communicator(f"/ws/runs/{run.pk}/", cookie)
        assert (await comm.connect())[0]
        events, state = await receive_until_state(comm)
        assert events[-1]["type"] == "approval_requested"
        slot = state["approvals"]["c9"]
        assert ('value="approve"' in slot) is can
        assert state["status"] == "waiting_approval"
        await comm.disconnect()


async def test_runs_socket_sends_statuses_read_from_the_database(setup_run: dict) -> None:
    run = setup_run["run"]
    comm = communicator("/ws/runs/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await sync_to_async(f.emit)(
        run, {"type": "run_finished", "data": {"final_answer": "ok"}}, status=Run.Status.SUCCEEDED
    )
    msg = await comm.receive_json_from(timeout=5)
    while msg.get("status") != "succeeded":
        msg = await comm.receive_json_from(timeout=5)
    assert msg == {"kind": "status", "run": run.pk, "status": "succeeded", "label": "Succeeded"}
    await comm.disconnect()


async def test_approvals_socket_counts_pending(setup_run: dict) -> None:
    """The count is what this person may decide: an approver's, never the run owner's."""
    approver = await sync_to_async(_user)("ap1", "approver")
    comm = communicator("/ws/approvals/", await sync_to_async(_cookie)(approver))
    owner = communicator("/ws/approvals/", setup_run["cookie"])
    assert (await comm.connect())[0] and (await owner.connect())[0]
    assert await comm.receive_json_from(timeout=5) == {"kind": "approvals", "pending": 0}
    assert await owner.receive_json_from(timeout=5) == {"kind": "approvals", "pending": 0}
    await sync_to_async(f.request_approval)(setup_run["run"])
    from channels.layers import get_channel_layer

    await get_channel_layer().group_send(publish.APPROVALS_GROUP, {"type": "approvals.changed"})
    assert await comm.receive_json_from(timeout=5) == {"kind": "approvals", "pending": 1}
    assert await owner.receive_json_from(timeout=5) == {"kind": "approvals", "pending": 0}
    await comm.disconnect()
    await owner.disconnect()


async def test_events_committed_during_connect_are_not_lost(setup_run: dict) -> None:
    """Many events written while several clients connect: each client gets every seq
    exactly once, in order."""
    run = setup_run["run"]

    async def writer() -> None:
        for i in range(20):
            await sync_to_async(f.emit)(run, f.model_called(text=f"step {i}"))
            await asyncio.sleep(0.005)

    async def client() -> list[int]:
        comm = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
        assert (await comm.connect())[0]
        got: list[int] = []
        while not got or got[-1] < 23:
            msg = await comm.receive_json_from(timeout=5)
            if msg["kind"] == "events":
                got.extend(seqs(msg["events"]))
        await comm.disconnect()
        return got

    results = await asyncio.gather(writer(), *(client() for _ in range(5)))
    for got in results[1:]:
        assert got == list(range(1, 24))


async def test_followers_of_one_run_share_a_subscription_and_leave_alone(setup_run: dict) -> None:
    run = setup_run["run"]
    first = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
    second = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
    for comm in (first, second):
        assert (await comm.connect())[0]
        await receive_until_state(comm)
    await sync_to_async(f.emit)(run, f.tool_finished())
    for comm in (first, second):
        events, _ = await receive_until_state(comm)
        assert seqs(events) == [4]
    await first.disconnect()
    await sync_to_async(f.emit)(run, f.model_called(text="Next."))
    events, _ = await receive_until_state(second)
    assert seqs(events) == [5]
    await second.disconnect()


async def test_a_decision_updates_every_followers_approval_controls(setup_run: dict) -> None:
    run = setup_run["run"]
    approval = await sync_to_async(f.request_approval)(run)
    approver = await sync_to_async(_user)("appr2", role="approver")
    comm = communicator(f"/ws/runs/{run.pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    _, state = await receive_until_state(comm)
    assert "approval-pending" in state["approvals"]["c9"]
    from agentweb.runs import actions

    await sync_to_async(actions.do_decide_approval)(
        approval_id=approval.pk, user=approver, decision="reject", comment="Too much <b>x</b>"
    )
    events, state = await receive_until_state(comm)
    assert [e["type"] for e in events] == ["approval_decided"]
    slot = state["approvals"]["c9"]
    assert "approval-rejected" in slot and "&lt;b&gt;x&lt;/b&gt;" in slot
    await comm.disconnect()


# --- hostile sockets (DESIGN §5) -------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/ws/runs/-1/", "/ws/runs/abc/", "/ws/nope/", "/ws/runs/99999999999999999999/", "/x"]
)
async def test_unknown_socket_paths_are_refused_with_4404(setup_run: dict, path: str) -> None:
    comm = communicator(path, setup_run["cookie"])
    connected, code = await comm.connect()
    assert (connected, code) == (False, 4404)
    await comm.disconnect()


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        ("http://localhost", True),
        ("http://localhost:80", True),
        ("http://localhost:9999", False),  # another port
        ("https://localhost", False),  # another scheme
        ("http://localhost.evil.example", False),
        ("null", False),
        ("", False),
    ],
)
async def test_the_origin_must_match_scheme_host_and_port(
    setup_run: dict, origin: str, ok: bool
) -> None:
    comm = communicator(f"/ws/runs/{setup_run['run'].pk}/", setup_run["cookie"], origin=origin)
    connected, _ = await comm.connect()
    assert connected is ok, origin
    await comm.disconnect()


async def test_a_trusted_origin_of_a_proxy_is_accepted(setup_run: dict, settings: Any) -> None:
    settings.CSRF_TRUSTED_ORIGINS = ["https://agents.example.com"]
    comm = communicator(
        f"/ws/runs/{setup_run['run'].pk}/",
        setup_run["cookie"],
        origin="https://agents.example.com",
    )
    assert (await comm.connect())[0]
    await comm.disconnect()


async def test_bad_frames_are_ignored_and_the_socket_goes_on(setup_run: dict, caplog: Any) -> None:
    comm = communicator(f"/ws/runs/{setup_run['run'].pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    await comm.send_to(text_data="not json")
    await comm.send_to(bytes_data=b"\x00\xff binary")
    await comm.send_to(text_data="[" * 1000 + "]" * 1000)
    await comm.send_to(text_data='{"kind": "resync", "after": NaN}')
    await comm.send_to(text_data='{"kind": "resync", "after": "\\ud800"}')
    await comm.send_to(text_data='{"kind": "resync", "after": 1e999}')
    await comm.send_to(text_data='{"kind": "resync", "after": 99999999999999999999999}')
    await comm.send_to(text_data='{"kind": "resync", "after": true}')
    first, _ = await receive_until_state(comm)  # "after": true is no seq: a plain resync
    assert first == []
    await comm.send_json_to({"kind": "resync", "after": 1})
    events, state = await receive_until_state(comm)
    assert seqs(events) == [2, 3] and state["kind"] == "state"
    assert "ignored" in caplog.text
    await comm.disconnect()


async def test_a_huge_frame_closes_with_4009(setup_run: dict) -> None:
    comm = communicator(f"/ws/runs/{setup_run['run'].pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    await comm.send_to(text_data='{"kind": "resync", "pad": "' + "x" * 1_000_000 + '"}')
    closed = await comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4009}


async def test_a_stream_of_garbage_closes_with_4400(setup_run: dict) -> None:
    comm = communicator(f"/ws/runs/{setup_run['run'].pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    for _ in range(25):
        await comm.send_to(text_data="}{")
    closed = await comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4400}


async def test_resync_requests_are_rate_limited(setup_run: dict) -> None:
    from agentweb.web import consumers

    comm = communicator(f"/ws/runs/{setup_run['run'].pk}/", setup_run["cookie"])
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    for _ in range(200):
        await comm.send_json_to({"kind": "resync", "after": 0})
    answered = 0
    while not await comm.receive_nothing(timeout=1):
        msg = await comm.receive_json_from(timeout=1)
        answered += msg["kind"] == "state"
    assert 1 <= answered <= consumers.RESYNC_BURST + 1, answered
    await comm.disconnect()


async def test_sockets_close_when_their_session_logs_out(setup_run: dict) -> None:
    run = setup_run["run"]
    cookie = setup_run["cookie"]
    run_socket = communicator(f"/ws/runs/{run.pk}/", cookie)
    approvals_socket = communicator("/ws/approvals/", cookie)
    assert (await run_socket.connect())[0]
    assert (await approvals_socket.connect())[0]
    await receive_until_state(run_socket)
    await approvals_socket.receive_json_from(timeout=5)

    def log_out() -> int:
        client = Client()
        client.cookies["sessionid"] = cookie.split("=", 1)[1]
        return client.post("/accounts/logout/").status_code

    assert await sync_to_async(log_out)() in (200, 302)
    for comm in (run_socket, approvals_socket):
        closed = await comm.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": 4401}
