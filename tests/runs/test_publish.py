"""Events are stored before they are published: wake-ups leave only after commit."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from agentweb.runs import actions, publish
from agentweb.runs.models import Run


def test_events_are_published_only_after_commit(people, enqueued, monkeypatch) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(publish, "send_now", lambda group, message: sent.append((group, message)))
    run = actions.do_create_run(user=people["operator"], task="x")
    sent.clear()
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        actions.append_events(locked, [{"type": "run_started", "data": {}}])
        assert sent == []  # nothing leaves before the commit
    assert (publish.run_group(run.pk), {"type": "run.event", "run": run.pk, "seq": 1}) in sent


def test_events_are_stored_as_the_orm_would_store_them(people, enqueued) -> None:
    """append_events writes its rows with one INSERT of its own: same values, encoder
    and auto_now_add time as bulk_create, and the rows it returns have their ids."""
    from datetime import UTC, datetime
    from decimal import Decimal

    from agentweb.runs.models import RunEvent

    run = actions.do_create_run(user=people["operator"], task="x")
    when = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        rows = actions.append_events(
            locked,
            [
                {"type": "run_started", "data": {}},
                {"type": "note", "data": {"amount": Decimal("1.50"), "at": when, "q": 'a "b" \\'}},
                {"type": "run_finished"},
            ],
        )
    stored = list(RunEvent.objects.filter(run=run).order_by("seq"))
    assert [r.pk for r in rows] == [e.pk for e in stored] and None not in [r.pk for r in rows]
    assert [(e.seq, e.type) for e in stored] == [
        (1, "run_started"),
        (2, "note"),
        (3, "run_finished"),
    ]
    assert stored[1].data == {"amount": "1.50", "at": "2026-11-01T12:00:00Z", "q": 'a "b" \\'}
    assert stored[2].data == {}
    assert [e.at for e in stored] == [r.at for r in rows] and None not in [r.at for r in rows]
    assert Run.objects.get(pk=run.pk).last_seq == 3


def test_a_rolled_back_step_publishes_nothing(people, enqueued, monkeypatch) -> None:
    sent: list[Any] = []
    monkeypatch.setattr(publish, "send_now", lambda group, message: sent.append(message))
    run = actions.do_create_run(user=people["operator"], task="x")
    sent.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        actions.append_events(locked, [{"type": "run_started", "data": {}}])
        raise RuntimeError("crash before commit")
    assert sent == []
    assert Run.objects.get(pk=run.pk).last_seq == 0


def test_the_background_sender_delivers_in_order(people) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("test-order", channel)
    for i in range(20):
        publish.send_now("test-order", {"type": "x", "i": i})
    assert publish.flush(5)

    async def receive_all() -> list[int]:
        return [(await layer.receive(channel))["i"] for _ in range(20)]

    assert async_to_sync(receive_all)() == list(range(20))
