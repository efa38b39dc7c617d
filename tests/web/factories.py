"""Runs and events written through the real action helpers, for tests that need a run in a
given state without waiting for a worker."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from agentweb.runs import actions
from agentweb.runs.models import AgentProfile, Approval, Run, RunEvent, arguments_hash


def make_run(user: Any, task: str = "Where is order A1001?", status: str = "running") -> Run:
    agent, _ = AgentProfile.objects.get_or_create(
        name="ticket-assistant", defaults={"system_prompt": "You help."}
    )
    return Run.objects.create(
        task=task,
        agent=agent,
        model="demo",
        created_by=user,
        status=status,
        started_at=timezone.now(),
    )


def emit(run: Run, *events: dict[str, Any], status: str | None = None) -> list[RunEvent]:
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if status:
            locked.status = status
            fields = ["status"]
            if status in Run.FINAL:
                locked.finished_at = timezone.now()
                fields.append("finished_at")
            locked.save(update_fields=fields)
        rows = actions.append_events(locked, events)
    run.refresh_from_db()
    return rows


def model_called(
    text: str = "Let me look up the order.",
    tool: str = "get_order",
    arguments: dict[str, Any] | None = None,
    call_id: str = "c1",
) -> dict[str, Any]:
    calls = [{"id": call_id, "name": tool, "arguments": arguments or {"order_id": "A1001"}}]
    return {
        "type": "model_called",
        "data": {
            "model": "demo",
            "latency_ms": 120,
            "tokens": {"input": 350, "output": 40},
            "text": text,
            "tool_calls": calls if tool else [],
        },
    }


def tool_started(
    tool: str = "get_order",
    arguments: dict[str, Any] | None = None,
    call_id: str = "c1",
    risk: str = "low",
) -> dict[str, Any]:
    return {
        "type": "tool_call_started",
        "data": {
            "call_id": call_id,
            "tool": tool,
            "arguments": arguments or {"order_id": "A1001"},
            "risk": risk,
        },
    }


def tool_finished(
    tool: str = "get_order",
    result: Any = None,
    call_id: str = "c1",
    ok: bool = True,
    error: str = "",
) -> dict[str, Any]:
    return {
        "type": "tool_call_finished",
        "data": {
            "call_id": call_id,
            "tool": tool,
            "ok": ok,
            "result": result if result is not None else {"order": "A1001", "status": "shipped"},
            "error": error or None,
            "duration_ms": 35,
        },
    }


def request_approval(
    run: Run,
    tool: str = "issue_refund",
    call_id: str = "c9",
    arguments: dict[str, Any] | None = None,
    risk: str = "high",
    reason: str = "high risk",
    why: str | None = None,
) -> Approval:
    """A pending approval as the engine stores one: its row and its event (``reason``: the
    code, ``why``: the words a rule gave, when it gave any)."""
    arguments = arguments or {"order_id": "A1001", "amount": 25.0, "reason": "late delivery"}
    approval = Approval.objects.create(
        run=run,
        call_id=call_id,
        tool=tool,
        arguments=arguments,
        arguments_hash=arguments_hash(arguments),
        risk=risk,
        reason=reason,
        expires_at=actions.approval_expiry(),
    )
    data = {"call_id": call_id, "tool": tool, "arguments": arguments, "risk": risk}
    data["reason"] = reason
    if why:
        data["why"] = why
    emit(run, {"type": "approval_requested", "data": data}, status=Run.Status.WAITING_APPROVAL)
    return approval
