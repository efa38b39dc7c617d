"""What the tickets app plugs into the others once Django is ready (``apps.py``): the
rules that start runs listen for arriving tickets, and the pages for the deliveries of
replies. Imported by ``TicketsConfig.ready`` only: it imports models."""

from __future__ import annotations

from agentweb.outbox import actions as outbox
from agentweb.tickets import actions, intake, replies


def install() -> None:
    intake.install()
    outbox.on_change(replies.ABOUT, actions.delivery_changed)
