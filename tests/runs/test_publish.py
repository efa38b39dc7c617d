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
