"""Server-rendered pieces of the run page, shared by the view and the WebSocket consumer.

Event fragments depend only on the stored event (immutable once written), so they are
cached per (run, seq). What depends on the viewer (approval buttons, cancel) is rendered
separately and sent as its own message.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.template.loader import render_to_string

from agentweb.runs.actions import may_decide
from agentweb.runs.models import Approval, Run, RunEvent
from agentweb.web import timeline

_CACHE_SIZE = 20_000
_event_cache: OrderedDict[tuple[int, int], str] = OrderedDict()

User = AbstractBaseUser | AnonymousUser


def event_html(run: Run, step: timeline.Step) -> str:
    key = (run.pk, step.seq)
    html = _event_cache.get(key)
    if html is None:
        html = render_to_string("web/_event.html", {"step": step, "run": run})
        _event_cache[key] = html
        if len(_event_cache) > _CACHE_SIZE:
            _event_cache.popitem(last=False)
    return html


def turns_before(run: Run, seq: int) -> int:
    return RunEvent.objects.filter(run=run, seq__lte=seq, type="model_called").count()


def can_cancel(user: Any, run: Run) -> bool:
    return bool(
        run.is_active
        and user.is_authenticated
        and (user.has_perm("runs.cancel_run") or run.created_by_id == user.pk)
    )


def header_context(run: Run, user: Any, steps: list[timeline.Step] | None = None) -> dict[str, Any]:
    if steps is None:
        events = RunEvent.objects.filter(
            run=run, type__in=("model_called", "tool_call_finished")
        ).only("seq", "type", "data")
        steps = timeline.steps_for(events, model=run.model)
    timing = timeline.timing_for(steps)
    return {
        "run": run,
        "usage": timeline.usage_for(run),
        "cost": timeline.total_cost(run, steps),
        "timing": timing,
        "can_cancel": can_cancel(user, run),
        "turns": sum(1 for s in steps if s.type == "model_called"),
    }


def header_html(run: Run, user: Any) -> str:
    return render_to_string("web/_run_header.html", header_context(run, user))


def approval_slots(run: Run, user: Any) -> dict[str, dict[str, Any]]:
    """Each approval of the run with what this viewer may do about it."""
    slots = {}
    for approval in Approval.objects.filter(run=run).select_related("decided_by", "run"):
        allowed, why = may_decide(user, approval)
        slots[approval.call_id] = {
            "approval": approval,
            "may_decide": allowed and approval.status == Approval.Status.PENDING,
            "why": why,
        }
    return slots


def approval_slot_html(slot: dict[str, Any], next_url: str) -> str:
    return render_to_string("web/_approval_slot.html", {**slot, "next": next_url})
