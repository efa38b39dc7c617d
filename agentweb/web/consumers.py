"""WebSocket consumers. Channel-layer messages are only wake-up calls: every send reads
the database, so a lost or repeated wake-up costs a query, never an event.

Run socket protocol (``/ws/runs/<id>/?after=<seq>``), server → client JSON:

- ``{"kind": "events", "events": [{"seq", "type", "html"}...], "last_seq", "read_at"}``:
  every stored event after the last one sent, in seq order; ``html`` is the escaped
  fragment whose root has ``id="event-<seq>"``; ``read_at`` is the server's clock (Unix
  seconds) when the events were read from the database.
- ``{"kind": "state", "status", "active", "last_seq", "header", "approvals": {call_id:
  html}}``: the run header and the viewer's approval controls, after each batch.
- ``{"kind": "delta", "text"}``: the streamed text of the current model call (preview only;
  the stored ``model_called`` event replaces it).
- ``{"kind": "tree", "html"}``: the run tree (children's status and latest step), whenever
  a run of it stored events; ``html`` is the escaped fragment whose root is ``#run-tree``.

- ``{"kind": "live", "ok": false|true}``: the channel layer (Redis) went away / is back.
  While it is away the page says "reconnecting"; when it is back the consumer has joined
  its groups again and sent what was stored meanwhile.

Client → server: nothing is required; ``{"kind": "resync", "after"?: seq}`` asks for events
again (at most ``RESYNC_BURST`` at once, then one per ``RESYNC_EVERY`` seconds; more are
ignored). Every socket guards its frames (``GuardedConsumer``): binary, malformed or too
deeply nested frames are ignored with a log line, a frame over ``MAX_FRAME`` closes with
4009, a stream of bad frames with 4400, a failing handler with 4500 (never 1011).
Closes with 4401 (not logged in, or the session logged out), 4403 (run not visible) or
4404 (no such run or path).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from channels.db import DatabaseSyncToAsync
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch

from agentweb.middleware import MAX_INT, BadInput, strict_json
from agentweb.runs import publish
from agentweb.runs.models import Run, RunEvent
from agentweb.tickets.actions import TICKETS_GROUP
from agentweb.tickets.models import Ticket
from agentweb.web import fragments, outcome, run_tree, timeline
from agentweb.web.context import pending_count

BATCH = 200
TREE_COALESCE = 0.2
MAX_FRAME = 64 * 1024  # characters of one client frame; clients send a few bytes
MAX_FRAME_DEPTH = 8
MAX_BAD_FRAMES = 20
LAYER_RETRY = 1.0  # seconds between attempts to re-join groups while Redis is away
RESYNC_BURST = 5
RESYNC_EVERY = 2.0
log = logging.getLogger(__name__)


def _query_int(scope: dict[str, Any], name: str) -> int:
    raw = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name, ["0"])[0]
    if not raw.isascii() or not raw.isdecimal() or len(raw) > 18:
        return 0
    return int(raw)


class GuardedConsumer(AsyncJsonWebsocketConsumer):
    """A JSON socket that survives its clients and Redis.

    - Frames: text only, at most ``MAX_FRAME`` characters, strict JSON at most
      ``MAX_FRAME_DEPTH`` deep; others are ignored with a log line (a stream of them
      closes with 4400; an oversized one closes with 4009).
    - A handler that fails closes with 4500 and a log line, not 1011 and a traceback.
    - The channel layer: when Redis goes away the socket stays open; ``layer_lost`` is
      called once, groups are joined again every ``LAYER_RETRY`` seconds until that
      works, then ``layer_back`` is called. (Channels' own loop would end the consumer
      with the first ``ConnectionError``.)
    - The session: every socket joins its session's group and closes with 4401 when that
      session logs out.
    """

    layer_ok: bool = True
    bad_frames: int = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = scope
        self.base_send = send
        self.joined: set[str] = set()
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        sources = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            sources.append(self._layer_receive)
        with contextlib.suppress(StopConsumer):
            await await_many_dispatch(sources, self.dispatch)

    @property
    def where(self) -> str:
        return str(self.scope.get("path", "?"))

    async def dispatch(self, message: dict[str, Any]) -> None:
        try:
            await super().dispatch(message)
        except StopConsumer:
            raise
        except Exception:
            log.exception("websocket %s: handling %s failed", self.where, message.get("type"))
            await self.close(code=4500)

    # --- frames ---------------------------------------------------------------------------

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        if text_data is None:
            await self._bad_frame("a binary frame")
            return
        if len(text_data) > MAX_FRAME:
            log.warning(
                "websocket %s: closed, a frame of %d characters", self.where, len(text_data)
            )
            await self.close(code=4009)
            return
        try:
            content = strict_json(text_data, max_depth=MAX_FRAME_DEPTH)
        except BadInput as exc:
            await self._bad_frame(str(exc))
            return
        await self.receive_json(content)

    async def _bad_frame(self, why: str) -> None:
        self.bad_frames += 1
        if self.bad_frames <= 3:
            log.warning("websocket %s: ignored %s", self.where, why[:200])
        if self.bad_frames > MAX_BAD_FRAMES:
            log.warning("websocket %s: closed after %d bad frames", self.where, self.bad_frames)
            await self.close(code=4400)

    # --- groups and the channel layer ------------------------------------------------------

    async def join(self, group: str) -> None:
        self.joined.add(group)
        try:
            await self.channel_layer.group_add(group, self.channel_name)
        except Exception as exc:  # Redis away: joined again by _layer_receive
            self._lost(exc)

    async def leave_all(self) -> None:
        for group in list(self.joined):
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(group, self.channel_name)
        self.joined.clear()

    async def join_session(self) -> None:
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        if key:
            await self.join(publish.session_group(key))

    def _lost(self, exc: BaseException) -> None:
        if self.layer_ok:
            self.layer_ok = False
            log.warning("websocket %s: channel layer unavailable (%s)", self.where, exc)

    async def _layer_receive(self) -> dict[str, Any]:
        was_ok = self.layer_ok
        while not self.layer_ok:
            if not was_ok:
                await asyncio.sleep(LAYER_RETRY)
            was_ok = False
            try:
                for group in list(self.joined):
                    await self.channel_layer.group_add(group, self.channel_name)
            except Exception as exc:  # still away; try again after LAYER_RETRY
                log.debug("websocket %s: groups not joined yet (%s)", self.where, exc)
                continue
            self.layer_ok = True
            log.info("websocket %s: channel layer back, groups joined again", self.where)
            return {"type": "layer.back"}
        try:
            message: dict[str, Any] = await self.channel_layer.receive(self.channel_name)
            return message
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._lost(exc)
            return {"type": "layer.lost"}

    async def layer_lost(self, message: dict[str, Any]) -> None:
        """Redis went away (called once per outage)."""

    async def layer_back(self, message: dict[str, Any]) -> None:
        """Redis is back and the groups are joined again."""

    async def session_ended(self, message: dict[str, Any]) -> None:
        log.info("websocket %s: closed, its session logged out", self.where)
        await self.close(code=4401)

    async def disconnect(self, code: int) -> None:
        await self.leave_all()


class NotFoundConsumer(AsyncWebsocketConsumer):
    """Any other path under ws/: refused with 4404 before the handshake completes."""

    channel_layer_alias = "__none__"  # no channel of its own

    async def connect(self) -> None:
        log.info("websocket %s: no such path", self.scope.get("path"))
        await self.close(code=4404)


# Database reads of the consumers run here, not in the single shared sync thread: hundreds
# of followers must not queue behind one another. One pool per process (not per event
# loop), so each thread keeps one database connection.
READ_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="ws-read")


def off_thread(func: Any) -> Any:
    return DatabaseSyncToAsync(func, thread_sensitive=False, executor=READ_POOL)


@dataclass(frozen=True)
class Snapshot:
    """One database read of a run: its row and its events after ``after`` (rendered)."""

    run: Run
    after: int
    events: list[dict[str, Any]]
    message: str  # the "events" message, encoded once for every follower

    @property
    def upto(self) -> int:
        return self.events[-1]["seq"] if self.events else self.after

    @property
    def full(self) -> bool:
        return len(self.events) >= BATCH


def _read_run(run_id: int, after: int) -> Snapshot:
    run = Run.objects.select_related("agent", "created_by").get(pk=run_id)
    events = list(RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:BATCH])
    batch = []
    if events:
        base = fragments.turns_before(run, events[0].seq - 1)
        for step in timeline.steps_for(events, model=run.model, turn_base=base):
            batch.append(
                {"seq": step.seq, "type": step.type, "html": fragments.event_html(run, step)}
            )
    last = batch[-1]["seq"] if batch else after
    message = json.dumps(
        {"kind": "events", "events": batch, "last_seq": last, "read_at": time.time()}
    )
    return Snapshot(run=run, after=after, events=batch, message=message)


class SharedReads:
    """Followers of one run in this process share their reads.

    A wake-up says "run N has events up to S"; the followers woken by it ask for the
    same rows at the same moment, so one read serves them all. A shared read is used
    only when it already covers S (the hint can only make us read again, never skip a
    read), and a fresh connection or a resync always reads anew after subscribing."""

    def __init__(self) -> None:
        self.inflight: dict[tuple[int, int], asyncio.Future[Snapshot]] = {}
        self.recent: OrderedDict[tuple[int, int], Snapshot] = OrderedDict()

    async def read(self, run_id: int, after: int, hint: int | None) -> Snapshot:
        if hint is None:
            return await off_thread(_read_run)(run_id, after)
        key = (run_id, after)
        recent = self.recent.get(key)
        if recent is not None and (recent.upto >= hint or recent.full):
            return recent
        future = self.inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(off_thread(_read_run)(run_id, after))
            self.inflight[key] = future
            future.add_done_callback(lambda f: self._done(key, f))
        snap: Snapshot = await asyncio.shield(future)
        if snap.upto >= hint or snap.full:
            return snap
        # The shared read began before the commit we were woken for: read again.
        return await off_thread(_read_run)(run_id, after)

    def _done(self, key: tuple[int, int], future: asyncio.Future[Snapshot]) -> None:
        self.inflight.pop(key, None)
        if future.cancelled() or future.exception() is not None:
            return
        self.recent[key] = future.result()
        self.recent.move_to_end(key)
        while len(self.recent) > 256:
            self.recent.popitem(last=False)


shared_reads = SharedReads()


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("run follower failed", exc_info=task.exception())


def _render_state(run: Run, user: Any) -> tuple[str, dict[str, str]]:
    return (
        fragments.header_html(run, user),
        fragments.approval_slots_html(run, user, f"/runs/{run.pk}/"),
    )


class RunFanout:
    """One channel-layer subscription per followed run and process.

    However many browsers in this process follow a run, Redis delivers each wake-up for
    it once, to a channel of this run; the followers here are woken directly. Adding and
    dropping the subscription of a run is serialised by a per-run lock, and a follower is
    woken only after the subscription exists (subscribe first, then read)."""

    LINGER = 60.0  # seconds a subscription outlives its last follower
    RENEW = 3600.0  # re-add memberships this old (the layer expires groups after a day)

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.followers: dict[int, set[RunConsumer]] = {}
        self.channels: dict[int, str] = {}
        self.added_at: dict[int, float] = {}
        self.readers: dict[int, asyncio.Future[None]] = {}
        self.droppers: set[asyncio.Future[None]] = set()
        self.renders: dict[tuple[Any, ...], asyncio.Future[tuple[str, dict[str, str]]]] = {}
        self.locks: dict[int, asyncio.Lock] = {}
        self.lost: set[int] = set()  # runs whose group membership must be added again

    async def state(self, run: Run, user: Any) -> tuple[str, dict[str, str]]:
        """Header and approval controls; followers woken together share one render."""
        cached = fragments.cached_state(run, user)
        if cached is not None:
            return cached
        key = fragments.state_key(run, user)
        future = self.renders.get(key)
        if future is None:
            future = asyncio.ensure_future(off_thread(_render_state)(run, user))
            self.renders[key] = future
            future.add_done_callback(lambda _: self.renders.pop(key, None))
        return await asyncio.shield(future)

    async def follow(self, run_id: int, consumer: RunConsumer) -> None:
        self.followers.setdefault(run_id, set()).add(consumer)
        lock = self.locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            channel = self.channels.get(run_id)
            if channel is None:
                # The default prefix: channels-redis receives all of a process's own
                # channels through one queue.
                channel = await self.layer.new_channel()
                self.channels[run_id] = channel
                self.readers[run_id] = asyncio.ensure_future(self._read(run_id, channel))
            if time.monotonic() - self.added_at.get(run_id, -self.RENEW) >= self.RENEW:
                try:
                    await self.layer.group_add(publish.run_group(run_id), channel)
                    self.added_at[run_id] = time.monotonic()
                except Exception as exc:  # Redis away: the reader joins again when it is back
                    log.warning("fan-out for run %s: cannot join its group (%s)", run_id, exc)
                    self.lost.add(run_id)

    async def unfollow(self, run_id: int, consumer: RunConsumer) -> None:
        followers = self.followers.get(run_id)
        if followers is None:
            return
        followers.discard(consumer)
        if not followers:
            dropper = asyncio.ensure_future(self._drop_later(run_id))
            self.droppers.add(dropper)
            dropper.add_done_callback(self.droppers.discard)

    async def _drop_later(self, run_id: int) -> None:
        await asyncio.sleep(self.LINGER)
        lock = self.locks.setdefault(run_id, asyncio.Lock())
        async with lock:
            if self.followers.get(run_id) or run_id not in self.channels:
                return
            channel = self.channels.pop(run_id)
            self.added_at.pop(run_id, None)
            self.followers.pop(run_id, None)
            reader = self.readers.pop(run_id, None)
            self.lost.discard(run_id)
            try:
                await self.layer.group_discard(publish.run_group(run_id), channel)
            except Exception as exc:  # Redis away: the membership expires on its own
                log.info("fan-out for run %s: cannot leave its group (%s)", run_id, exc)
            finally:
                if reader is not None:
                    reader.cancel()

    async def _read(self, run_id: int, channel: str) -> None:
        while True:
            if run_id in self.lost:
                # Redis was away (and may have come back empty): join the group again, then
                # have every follower read what was stored meanwhile.
                try:
                    await self.layer.group_add(publish.run_group(run_id), channel)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    await asyncio.sleep(LAYER_RETRY)
                    continue
                self.added_at[run_id] = time.monotonic()
                self.lost.discard(run_id)
                log.info("fan-out for run %s: group joined again", run_id)
                for consumer in list(self.followers.get(run_id, ())):
                    consumer.wake({"type": "run.event", "seq": None})
            try:
                message = await self.layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the record is in PostgreSQL; join again and go on
                if run_id not in self.lost:
                    log.warning("fan-out for run %s: receive failed (%s)", run_id, exc)
                self.lost.add(run_id)
                await asyncio.sleep(LAYER_RETRY)
                continue
            for consumer in list(self.followers.get(run_id, ())):
                consumer.wake(message)


_fanouts: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RunFanout] = (
    weakref.WeakKeyDictionary()
)


def fanout(layer: Any) -> RunFanout:
    """The fan-out of this event loop (one per server process; one per test)."""
    loop = asyncio.get_running_loop()
    found = _fanouts.get(loop)
    if found is None:
        found = _fanouts[loop] = RunFanout(layer)
    return found


class RunConsumer(GuardedConsumer):
    run_id: int
    sent: int
    lock: asyncio.Lock
    following: bool = False
    closed: bool = False
    tree_pending: bool = False
    resync_tokens: float = RESYNC_BURST
    resync_at: float = 0.0
    resyncs_ignored: int = 0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if not 0 < self.run_id <= MAX_INT:
            await self.close(code=4404)
            return
        if not await self._visible():
            await self.close(code=4403)
            return
        self.sent = _query_int(self.scope, "after")
        self.lock = asyncio.Lock()
        self.resync_at = time.monotonic()
        await self.join_session()
        async with self.lock:
            # Subscribe first, then read: an event committed in between is either in the
            # read or announced by a wake-up after it (read again, deduplicated by seq).
            await fanout(self.channel_layer).follow(self.run_id, self)
            self.following = True
            await self.accept()
            await self.send_new(hint=None)

    async def disconnect(self, code: int) -> None:
        self.closed = True
        if self.following:
            await fanout(self.channel_layer).unfollow(self.run_id, self)
        await self.leave_all()

    def _may_resync(self) -> bool:
        """A token bucket per socket: a burst of ``RESYNC_BURST``, then one per
        ``RESYNC_EVERY`` seconds (a resync costs a database read and a resend)."""
        now = time.monotonic()
        self.resync_tokens = min(
            RESYNC_BURST, self.resync_tokens + (now - self.resync_at) / RESYNC_EVERY
        )
        self.resync_at = now
        if self.resync_tokens >= 1:
            self.resync_tokens -= 1
            return True
        self.resyncs_ignored += 1
        if self.resyncs_ignored in (1, 100, 1000, 10000):
            log.warning(
                "websocket %s: %d resync requests ignored", self.where, self.resyncs_ignored
            )
        return False

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("kind") == "resync":
            if not self._may_resync():
                return
            async with self.lock:
                after = content.get("after")
                if (
                    isinstance(after, int)
                    and not isinstance(after, bool)
                    and 0 <= after < self.sent
                ):
                    self.sent = after
                await self.send_new(hint=None)

    async def layer_lost(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": "live", "ok": False})

    async def layer_back(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": "live", "ok": True})
        async with self.lock:
            if not self.closed:
                await self.send_new(hint=None)  # what was stored while Redis was away

    def wake(self, message: dict[str, Any]) -> None:
        """Called by the fan-out for each wake-up of this run."""
        task = asyncio.ensure_future(self._on_wake(message))
        task.add_done_callback(_log_failure)

    async def _on_wake(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        kind = message.get("type")
        if kind == "run.delta":
            offset = message.get("offset")
            await self.send_json(
                {
                    "kind": "delta",
                    "offset": offset if isinstance(offset, int) else 0,
                    "text": str(message.get("text", "")),
                }
            )
            return
        if kind == "run.tree":
            await self._send_tree()
            return
        if kind != "run.event":
            return
        seq = message.get("seq")
        hint = seq if isinstance(seq, int) and seq > 0 else None
        async with self.lock:
            if self.closed:
                return
            if hint is not None and hint <= self.sent:
                hint = self.sent  # an old or repeated wake-up: still re-check, cheaply
            await self.send_new(hint=hint)

    async def send_new(self, hint: int | None) -> None:
        while True:
            snap = await shared_reads.read(self.run_id, self.sent, hint)
            if snap.events:
                self.sent = snap.upto
                await self.send(text_data=snap.message)
            if not snap.full:
                await self.send_json(await self._state(snap.run))
                return
            hint = None

    async def _send_tree(self) -> None:
        """The run tree again (a run of it stored events); a burst of wake-ups within
        ``TREE_COALESCE`` seconds costs one render."""
        if self.tree_pending:
            return
        self.tree_pending = True
        try:
            await asyncio.sleep(TREE_COALESCE)
            html = await off_thread(run_tree.tree_html)(self.run_id)
        finally:
            self.tree_pending = False
        if not self.closed:
            await self.send_json({"kind": "tree", "html": html})

    async def _state(self, run: Run) -> dict[str, Any]:
        header, slots = await fanout(self.channel_layer).state(run, self.scope["user"])
        return {
            "kind": "state",
            "status": run.status,
            "active": run.is_active,
            "last_seq": run.last_seq,
            "header": header,
            "approvals": slots,
        }

    @off_thread
    def _visible(self) -> bool:
        user = self.scope["user"]
        # Load the permission cache now, in a thread: later checks need no query.
        user.get_all_permissions()
        return Run.objects.visible_to(user).filter(pk=self.run_id).exists()


class RunsConsumer(GuardedConsumer):
    """Run statuses for the runs list: ``{"kind": "status", "run", "status", "label"}``
    (and ``"outcome": "needs_follow_up"`` for a succeeded run that needs it), read from
    the database, only for runs the user may see."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await self.join_session()
        await self.join(publish.RUNS_GROUP)
        await self.accept()

    async def layer_lost(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": "live", "ok": False})

    async def layer_back(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": "live", "ok": True})

    async def run_status(self, message: dict[str, Any]) -> None:
        try:
            run_id = int(message.get("run", 0))
        except (TypeError, ValueError):
            return
        row = await self._status(run_id)
        if row is not None:
            await self.send_json({"kind": "status", "run": run_id, **row})

    @off_thread
    def _status(self, run_id: int) -> dict[str, Any] | None:
        run = Run.objects.visible_to(self.scope["user"]).filter(pk=run_id).first()
        if run is None:
            return None
        # A succeeded run's actions say whether it reads "Needs follow-up" instead.
        actions = run.actions() if run.status == Run.Status.SUCCEEDED else []
        state = outcome.run_state(run.status, actions)
        row = {"status": run.status, "label": state.label}
        if state.follow_up:
            row["outcome"] = "needs_follow_up"
        return row


class ApprovalsConsumer(GuardedConsumer):
    """Pending approvals the user can see: ``{"kind": "approvals", "pending": n}`` on
    connect and whenever approvals change."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await self.join_session()
        await self.join(publish.APPROVALS_GROUP)
        await self.accept()
        await self.approvals_changed({})

    async def layer_back(self, message: dict[str, Any]) -> None:
        await self.approvals_changed({})  # changes made while Redis was away

    async def approvals_changed(self, message: dict[str, Any]) -> None:
        count = await off_thread(pending_count)(self.scope["user"])
        await self.send_json({"kind": "approvals", "pending": count})


class TicketsConsumer(GuardedConsumer):
    """Ticket changes for the ticket pages: ``{"kind": "ticket", "ticket", "created"}``
    when a ticket the user may see arrives or changes (a message, a reply's delivery, a
    status) or one of its runs changes status. ``?ticket=<id>``: that ticket only (its
    page; 4403 when the user may not see it, as a run's socket). The page fetches what it
    shows again."""

    ticket_id: int = 0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.ticket_id = _query_int(self.scope, "ticket")
        if self.ticket_id and not await self._visible(self.ticket_id):
            await self.close(code=4403)
            return
        await self.join_session()
        await self.join(TICKETS_GROUP)
        await self.join(publish.RUNS_GROUP)
        await self.accept()

    async def layer_lost(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": "live", "ok": False})

    async def layer_back(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": "live", "ok": True})
        # changes made while Redis was away: the page reads itself again
        await self.send_json({"kind": "ticket", "ticket": self.ticket_id, "created": True})

    async def ticket_changed(self, message: dict[str, Any]) -> None:
        ticket_id = message.get("ticket")
        if not isinstance(ticket_id, int) or (self.ticket_id and ticket_id != self.ticket_id):
            return
        if await self._visible(ticket_id):
            created = bool(message.get("created"))
            await self.send_json({"kind": "ticket", "ticket": ticket_id, "created": created})

    async def run_status(self, message: dict[str, Any]) -> None:
        run_id = message.get("run")
        if not isinstance(run_id, int):
            return
        ticket_id = await self._ticket_of(run_id)
        if ticket_id is None or (self.ticket_id and ticket_id != self.ticket_id):
            return
        if await self._visible(ticket_id):
            await self.send_json({"kind": "ticket", "ticket": ticket_id, "run": run_id})

    @off_thread
    def _visible(self, ticket_id: int) -> bool:
        return Ticket.objects.visible_to(self.scope["user"]).filter(pk=ticket_id).exists()

    @off_thread
    def _ticket_of(self, run_id: int) -> int | None:
        found = Run.objects.filter(pk=run_id).values_list("ticket_id", flat=True).first()
        return found if isinstance(found, int) else None
