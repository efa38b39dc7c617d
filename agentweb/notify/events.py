"""Stored run events that reach people: called with each batch of events as it is stored,
in the transaction that stores it (so the deliveries commit with the events, in order)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentweb.notify import actions
from agentweb.notify.actions import ABOUT as ABOUT
from agentweb.runs import publish
from agentweb.runs.models import Approval, Run


def _approval(run: Run, data: dict[str, Any]) -> Approval | None:
    return (
        Approval.objects.select_related("run__agent", "run__created_by", "decided_by")
        .filter(run_id=run.pk, call_id=data.get("call_id"))
        .first()
    )


def events_stored(run: Run, rows: Iterable[Any]) -> None:
    """``rows``: the stored ``RunEvent``s (``type``, ``data``)."""
    for row in rows:
        kind, data = row.type, row.data or {}
        if kind == "approval_requested":
            approval = _approval(run, data)
            if approval is not None and approval.status == Approval.Status.PENDING:
                actions.do_notify_requested(approval)
        elif kind == "approval_decided" and actions.webhooks_configured():
            approval = _approval(run, data)
            if approval is not None:
                event = (
                    "approval.expired" if data.get("decision") == "expired" else "approval.decided"
                )
                actions.send_event(event, run, approval=approval)
        elif kind == "run_finished":
            actions.send_event("run.finished", run, status=Run.Status.SUCCEEDED)
        elif kind == "run_failed":
            actions.send_event("run.failed", run, status=Run.Status.FAILED)


def deliveries_changed(delivery: Any) -> None:
    """A notification was sent, failed or is retried: the inboxes show it."""
    publish.approvals_changed_on_commit()
