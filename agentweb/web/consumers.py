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

Client → server: nothing is required; ``{"kind": "resync"}`` asks for events again.
Closes with 4401 (not logged in) or 4403 (run not visible) before the handshake completes.
"""

from __future__ import annotations

import asyncio
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
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agentweb.runs import publish
from agentweb.runs.models import Run, RunEvent
from agentweb.web import fragments, outcome, run_tree, timeline
from agentweb.web.context import pending_count

BATCH = 200
TREE_COALESCE = 0.2
log = logging.getLogger(__name__)


def _query_int(scope: dict[str, Any], name: str) -> int:
    raw = parse_qs(scope.get("query_string", b"").decode()).get(name, ["0"])[0]
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


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
                await self.layer.group_add(publish.run_group(run_id), channel)
                self.added_at[run_id] = time.monotonic()

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
            try:
                await self.layer.group_discard(publish.run_group(run_id), channel)
            finally:
                if reader is not None:
                    reader.cancel()

    async def _read(self, run_id: int, channel: str) -> None:
        while True:
            try:
                message = await self.layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # the record is in PostgreSQL; keep listening
                log.warning("fan-out receive for run %s failed", run_id, exc_info=True)
                await asyncio.sleep(0.5)
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


class RunConsumer(AsyncJsonWebsocketConsumer):
    run_id: int
    sent: int
    lock: asyncio.Lock
    following: bool = False
    closed: bool = False
    tree_pending: bool = False

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if not await self._visible():
            await self.close(code=4403)
            return
        self.sent = _query_int(self.scope, "after")
        self.lock = asyncio.Lock()
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

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("kind") == "resync":
            async with self.lock:
                after = content.get("after")
                if isinstance(after, int) and 0 <= after < self.sent:
                    self.sent = after
                await self.send_new(hint=None)

    def wake(self, message: dict[str, Any]) -> None:
        """Called by the fan-out for each wake-up of this run."""
        task = asyncio.ensure_future(self._on_wake(message))
        task.add_done_callback(_log_failure)

    async def _on_wake(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        kind = message.get("type")
        if kind == "run.delta":
            await self.send_json({"kind": "delta", "text": str(message.get("text", ""))})
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


class RunsConsumer(AsyncJsonWebsocketConsumer):
    """Run statuses for the runs list: ``{"kind": "status", "run", "status", "label"}``,
    read from the database, only for runs the user may see."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await self.channel_layer.group_add(publish.RUNS_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(publish.RUNS_GROUP, self.channel_name)

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
        return {"status": run.status, "label": outcome.status_label(run.status)}


class ApprovalsConsumer(AsyncJsonWebsocketConsumer):
    """Pending approvals the user can see: ``{"kind": "approvals", "pending": n}`` on
    connect and whenever approvals change."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await self.channel_layer.group_add(publish.APPROVALS_GROUP, self.channel_name)
        await self.accept()
        await self.approvals_changed({})

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(publish.APPROVALS_GROUP, self.channel_name)

    async def approvals_changed(self, message: dict[str, Any]) -> None:
        count = await off_thread(pending_count)(self.scope["user"])
        await self.send_json({"kind": "approvals", "pending": count})
