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

Client → server: nothing is required; ``{"kind": "resync"}`` asks for events again.
Closes with 4401 (not logged in) or 4403 (run not visible) before the handshake completes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from channels.db import DatabaseSyncToAsync
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agentweb.runs import publish
from agentweb.runs.api import visible_runs
from agentweb.runs.models import Run, RunEvent
from agentweb.web import fragments, timeline
from agentweb.web.context import pending_count

BATCH = 200


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


class RunConsumer(AsyncJsonWebsocketConsumer):
    run_id: int
    sent: int
    group: str
    may_cancel_any: bool
    may_decide: bool

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
        self.group = publish.run_group(self.run_id)
        # Subscribe first, then read: an event committed in between is either in the read
        # or announced by a wake-up after it (and then read again, deduplicated by seq).
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_new(hint=None)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("kind") == "resync":
            after = content.get("after")
            if isinstance(after, int) and 0 <= after < self.sent:
                self.sent = after
            await self.send_new(hint=None)

    async def run_event(self, message: dict[str, Any]) -> None:
        seq = message.get("seq")
        hint = seq if isinstance(seq, int) and seq > 0 else None
        if hint is not None and hint <= self.sent:
            hint = self.sent  # an old or repeated wake-up: still re-check, cheaply
        await self.send_new(hint=hint)

    async def run_delta(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": "delta", "text": str(message.get("text", ""))})

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

    async def _state(self, run: Run) -> dict[str, Any]:
        user = self.scope["user"]
        # Followers of a run share these renders; only the first goes to a thread.
        cached = fragments.cached_state(run, user)
        header, slots = cached or await off_thread(self._render_state)(run, user)
        return {
            "kind": "state",
            "status": run.status,
            "active": run.is_active,
            "last_seq": run.last_seq,
            "header": header,
            "approvals": slots,
        }

    @staticmethod
    def _render_state(run: Run, user: Any) -> tuple[str, dict[str, str]]:
        return (
            fragments.header_html(run, user),
            fragments.approval_slots_html(run, user, f"/runs/{run.pk}/"),
        )

    @off_thread
    def _visible(self) -> bool:
        user = self.scope["user"]
        # Load the permission cache now, in a thread: later checks need no query.
        user.get_all_permissions()
        return visible_runs(user).filter(pk=self.run_id).exists()


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
        run = visible_runs(self.scope["user"]).filter(pk=run_id).first()
        if run is None:
            return None
        return {"status": run.status, "label": run.get_status_display()}


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
