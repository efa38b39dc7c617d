"""WebSocket consumers. Channel-layer messages are only wake-up calls: every send reads
the database, so a lost or repeated wake-up costs a query, never an event.

Run socket protocol (``/ws/runs/<id>/?after=<seq>``), server → client JSON:

- ``{"kind": "events", "events": [{"seq", "type", "html"}...], "last_seq"}``: every stored
  event after the last one sent, in seq order; ``html`` is the escaped fragment whose root
  has ``id="event-<seq>"``.
- ``{"kind": "state", "status", "active", "last_seq", "header", "approvals": {call_id:
  html}}``: the run header and the viewer's approval controls, after each batch.
- ``{"kind": "delta", "text"}``: the streamed text of the current model call (preview only;
  the stored ``model_called`` event replaces it).

Client → server: nothing is required; ``{"kind": "resync"}`` asks for events again.
Closes with 4401 (not logged in) or 4403 (run not visible) before the handshake completes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
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


def _csrf(scope: dict[str, Any]) -> str:
    return str(scope.get("cookies", {}).get("csrftoken", ""))


class RunConsumer(AsyncJsonWebsocketConsumer):
    run_id: int
    sent: int
    group: str

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
        await self.send_new()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("kind") == "resync":
            after = content.get("after")
            if isinstance(after, int) and 0 <= after < self.sent:
                self.sent = after
            await self.send_new()

    async def run_event(self, message: dict[str, Any]) -> None:
        await self.send_new()

    async def run_delta(self, message: dict[str, Any]) -> None:
        await self.send_json({"kind": "delta", "text": str(message.get("text", ""))})

    async def send_new(self) -> None:
        while True:
            batch, state = await self._read()
            if batch:
                self.sent = batch[-1]["seq"]
                await self.send_json({"kind": "events", "events": batch, "last_seq": self.sent})
            if len(batch) < BATCH:
                if state is not None:
                    await self.send_json(state)
                return

    @database_sync_to_async
    def _visible(self) -> bool:
        return visible_runs(self.scope["user"]).filter(pk=self.run_id).exists()

    @database_sync_to_async
    def _read(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        user = self.scope["user"]
        run = Run.objects.select_related("agent", "created_by").get(pk=self.run_id)
        events = list(RunEvent.objects.filter(run=run, seq__gt=self.sent).order_by("seq")[:BATCH])
        batch = []
        if events:
            base = fragments.turns_before(run, events[0].seq - 1)
            for step in timeline.steps_for(events, model=run.model, turn_base=base):
                batch.append(
                    {"seq": step.seq, "type": step.type, "html": fragments.event_html(run, step)}
                )
        if len(batch) == BATCH:
            return batch, None
        next_url = f"/runs/{run.pk}/"
        slots = {
            call_id: fragments.approval_slot_html({**slot, "csrf": _csrf(self.scope)}, next_url)
            for call_id, slot in fragments.approval_slots(run, user).items()
        }
        state = {
            "kind": "state",
            "status": run.status,
            "active": run.is_active,
            "last_seq": run.last_seq,
            "header": fragments.header_html(run, user),
            "approvals": slots,
        }
        return batch, state


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

    @database_sync_to_async
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
        count = await database_sync_to_async(pending_count)(self.scope["user"])
        await self.send_json({"kind": "approvals", "pending": count})
