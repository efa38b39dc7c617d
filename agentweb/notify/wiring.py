"""What the notify app plugs into the others once Django is ready (``apps.py``): every
stored batch of a run's events may announce an approval, and a delivery that changes
state changes what the approval cards say. Imported by ``NotifyConfig.ready`` only: it
imports models."""

from __future__ import annotations

from agentweb.notify import events
from agentweb.outbox import actions as outbox
from agentweb.runs import store


def install() -> None:
    store.on_events_stored(events.events_stored)
    outbox.on_change(events.ABOUT, events.deliveries_changed)
