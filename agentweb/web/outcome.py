"""What a run did, in words, beside its status: "refund 38.00 issued", "cancellation
rejected". Read from the run's ``actions`` (``runs.outcomes``) and the
arguments each call ran (or was asked) with. Plain strings: templates escape them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from agentweb.runs.follow_up import needs_follow_up
from agentweb.runs.models import Approval, Run, ToolExecution
from agentweb.runs.outcomes import actions_by_run, run_actions

STATUS_LABELS = {
    "queued": "Queued",
    "running": "Running",
    "waiting_approval": "Waiting on approver",
    "waiting_subtasks": "Waiting on subtasks",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "cancelled": "Cancelled",
}

# tool -> (what it is, the word for "it happened")
NOUNS: dict[str, tuple[str, str]] = {
    "issue_refund": ("refund", "issued"),
    "cancel_order": ("cancellation", "done"),
    "update_shipping_address": ("address change", "made"),
    "send_customer_reply": ("reply to the customer", "sent"),
    "add_customer_note": ("customer note", "added"),
    "escalate_to_carrier": ("carrier escalation", "sent"),
}
FATES = {
    "rejected": "rejected",
    "failed": "failed",
    "expired": "expired (nobody decided)",
    "cancelled": "not done (run ended)",
    "pending": "waiting on approver",
}
TONES = {
    "executed": "ok",
    "pending": "wait",
    "rejected": "bad",
    "failed": "bad",
    "expired": "bad",
    "cancelled": "muted",
}


FOLLOW_UP_LABEL = "Needs follow-up"
FOLLOW_UP_HINT = "It succeeded, but an action was rejected, failed or expired: look at it"


def status_label(status: str) -> str:
    return STATUS_LABELS.get(status, status.replace("_", " ").capitalize())


@dataclass(frozen=True)
class RunState:
    """What a run's badge says: its status, or "Needs follow-up" for a succeeded run with
    an action rejected, failed or expired."""

    css: str  # the badge's status-<css> class
    label: str
    follow_up: bool

    @property
    def hint(self) -> str:
        return FOLLOW_UP_HINT if self.follow_up else ""


def run_state(status: str, outcomes: Iterable[Any] | None = None) -> RunState:
    if needs_follow_up(status, outcomes or ()):
        return RunState("needs_follow_up", FOLLOW_UP_LABEL, True)
    return RunState(status, status_label(status), False)


@dataclass(frozen=True)
class Outcome:
    text: str
    tone: str  # ok | bad | wait | muted
    status: str
    tool: str
    by_policy: bool

    def __str__(self) -> str:
        return self.text


def _amount(value: Any) -> str:
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return ""
    if not number.is_finite():
        return ""
    return f"{number:.2f}"


def describe(action: dict[str, Any], arguments: Any = None) -> Outcome:
    tool = str(action.get("tool", ""))
    status = str(action.get("status", ""))
    noun, done = NOUNS.get(tool, (tool.replace("_", " "), "done"))
    if tool == "issue_refund" and isinstance(arguments, dict):
        amount = _amount(arguments.get("amount"))
        if amount:
            noun = f"refund {amount}"
    fate = done if status == "executed" else FATES.get(status, status)
    return Outcome(
        text=f"{noun} {fate}",
        tone=TONES.get(status, "muted"),
        status=status,
        tool=tool,
        by_policy=action.get("approved_by") == "policy",
    )


def _arguments(run_ids: list[int]) -> dict[tuple[int, str], Any]:
    """(run, call) -> the arguments it ran with, else the approved or asked ones."""
    found: dict[tuple[int, str], Any] = {}
    for run_id, call_id, asked, edited in Approval.objects.filter(run_id__in=run_ids).values_list(
        "run_id", "call_id", "arguments", "edited_arguments"
    ):
        found[(run_id, call_id)] = edited if edited is not None else asked
    for run_id, call_id, ran in ToolExecution.objects.filter(run_id__in=run_ids).values_list(
        "run_id", "call_id", "arguments"
    ):
        found[(run_id, call_id)] = ran
    return found


def for_runs(runs: Iterable[Run]) -> dict[int, list[Outcome]]:
    """Outcomes of many runs in four queries (lists, ticket cards)."""
    runs = list(runs)
    if not runs:
        return {}
    actions = actions_by_run(runs)
    args = _arguments([r.pk for r in runs])
    return {
        run_id: [describe(a, args.get((run_id, a["call_id"]))) for a in entries]
        for run_id, entries in actions.items()
    }


def for_run(run: Run) -> list[Outcome]:
    args = _arguments([run.pk])
    return [describe(a, args.get((run.pk, a["call_id"]))) for a in run_actions(run)]
