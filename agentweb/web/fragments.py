"""Server-rendered pieces of the run page, shared by the view and the WebSocket consumer.

Event fragments depend only on the stored event (immutable once written), so they are
cached per (run, seq). What depends on the viewer (approval buttons, cancel) is rendered
separately and sent as its own message.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.template.loader import render_to_string

from agentweb.runs import approval_why
from agentweb.runs.actions import may_cancel, may_decide
from agentweb.runs.models import Approval, Run, RunEvent
from agentweb.web import approval_form, outcome, timeline

User = AbstractBaseUser | AnonymousUser


class _Cache:
    """A small thread-safe LRU: consumers read from a thread pool, and many followers of
    one run ask for the same fragment at the same moment."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[Hashable, Any] = OrderedDict()
        self.lock = threading.Lock()

    def peek(self, key: Hashable) -> Any:
        with self.lock:
            return self.items.get(key)

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        value = make()
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value


_events = _Cache(10_000)
_headers = _Cache(2_000)
_slots = _Cache(2_000)


def event_html(run: Run, step: timeline.Step) -> str:
    """An event's fragment; stored events never change, so (run, seq) is the whole key."""
    return str(
        _events.get_or_make(
            (run.pk, step.seq, step.final_text),
            lambda: render_to_string("web/_event.html", {"step": step, "run": run}),
        )
    )


def turns_before(run: Run, seq: int) -> int:
    return RunEvent.objects.filter(run=run, seq__lte=seq, type="model_called").count()


def can_cancel(user: Any, run: Run) -> bool:
    return bool(run.is_active and user.is_authenticated and may_cancel(user, run)[0])


def header_context(run: Run, user: Any, steps: list[timeline.Step] | None = None) -> dict[str, Any]:
    if steps is None:
        events = RunEvent.objects.filter(
            run=run,
            type__in=(
                "model_called",
                "tool_call_finished",
                "approval_requested",
                "approval_decided",
            ),
        ).only("seq", "type", "data", "at")
        steps = timeline.steps_for(events, model=run.model)
    timing = timeline.timing_for(steps)
    return {
        "run": run,
        "usage": timeline.usage_for(run),
        "cost": timeline.total_cost(run, steps),
        "timing": timing,
        "can_cancel": can_cancel(user, run),
        "outcomes": outcome.for_run(run),
        "turns": sum(1 for s in steps if s.type == "model_called"),
    }


def _header_key(run: Run, user: Any) -> tuple[Any, ...]:
    return (run.pk, run.last_seq, run.status, can_cancel(user, run))


def _slots_key(run: Run, user: Any) -> tuple[Any, ...]:
    return (run.pk, run.last_seq, run.status, user.pk, user.has_perm("runs.decide_approval"))


def state_key(run: Run, user: Any) -> tuple[Any, ...]:
    return (_header_key(run, user), _slots_key(run, user) if run.last_seq else None)


def cached_state(run: Run, user: Any) -> tuple[str, dict[str, str]] | None:
    """Header and approval controls when both are already rendered, without touching the
    database (the user's permissions must be loaded already)."""
    header = _headers.peek(_header_key(run, user))
    slots = _slots.peek(_slots_key(run, user)) if run.last_seq else {}
    if header is None or slots is None:
        return None
    return str(header), dict(slots)


def header_html(run: Run, user: Any) -> str:
    """The run header; it changes only with a new event or status (the CSRF token of the
    cancel form is left empty and filled in by the page's script)."""
    key = _header_key(run, user)
    return str(
        _headers.get_or_make(
            key, lambda: render_to_string("web/_run_header.html", header_context(run, user))
        )
    )


def approval_slots_html(run: Run, user: Any, next_url: str) -> dict[str, str]:
    """call_id -> the viewer's approval controls, for every approval of the run."""

    def make() -> dict[str, str]:
        return {
            call_id: approval_slot_html(slot, next_url)
            for call_id, slot in approval_slots(run, user).items()
        }

    if not run.last_seq:
        return {}
    return dict(_slots.get_or_make(_slots_key(run, user), make))


def approval_slots(run: Run, user: Any) -> dict[str, dict[str, Any]]:
    """Each approval of the run with what this viewer may do about it."""
    slots = {}
    approvals = list(
        Approval.objects.filter(run=run).select_related("decided_by", "run", "run__agent")
    )
    pending = [a for a in approvals if a.status == Approval.Status.PENDING]
    explained = approval_why.explain_many(pending)
    for approval in approvals:
        allowed, why = may_decide(user, approval)
        may = allowed and approval.status == Approval.Status.PENDING
        slots[approval.call_id] = {
            "approval": approval,
            "may_decide": may,
            "why": why,
            "explained": explained.get(approval.pk),
            "form_fields": edit_fields(approval) if may else None,
        }
    return slots


def edit_fields(approval: Approval, **kwargs: Any) -> list[approval_form.ArgField] | None:
    """The Edit & approve fields of a pending approval (None: only the JSON box)."""
    return approval_form.fields_for(
        approval.tool, approval.arguments, id_prefix=f"arg-{approval.pk}", **kwargs
    )


def approval_slot_html(slot: dict[str, Any], next_url: str) -> str:
    return render_to_string("web/_approval_slot.html", {**slot, "next": next_url})
