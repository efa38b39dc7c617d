"""Every write to runs happens here: state and events in one transaction, published after.

Views, the API, commands and tasks parse their input, call one of these, and render.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import User
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from agentweb.observability.steps import events_stored as observe_stored
from agentweb.runs import publish, queue
from agentweb.runs.errors import (
    ActionError,
    Conflict,
    InvalidArguments,
    NotAllowed,
    NotFound,
    ProfileInUse,
    ReasonRequired,
    TicketBusy,
)
from agentweb.runs.models import AgentProfile, Approval, AuditEntry, Run, RunEvent, arguments_hash
from agentweb.runs.queue import QUEUE_GRACE
from agentweb.runtime import events as ev
from agentweb.runtime.tools import ToolArgumentError, ToolError
from agentweb.tickets.models import Ticket

log = logging.getLogger(__name__)

DEFAULT_AGENT = "ticket-assistant"


# --- events ---------------------------------------------------------------------------


def append_events(
    run: Run,
    events: Iterable[Mapping[str, Any]],
    *,
    save_seq: bool = True,
    status_changed: bool = True,
) -> list[RunEvent]:
    """Store events with the next seqs of ``run``. Call inside a transaction that holds
    the run's row lock (``select_for_update``), so seqs never collide. Publishes on commit
    (the run's status to the run lists too, unless ``status_changed`` is False).
    With ``save_seq=False`` the caller writes ``run.last_seq`` in its own UPDATE."""
    rows = []
    seq = run.last_seq
    for event in events:
        seq += 1
        rows.append(RunEvent(run=run, seq=seq, type=event["type"], data=event.get("data") or {}))
    if not rows:
        return []
    _insert_events(rows)
    run.last_seq = seq
    if save_seq:
        Run.objects.filter(pk=run.pk).update(last_seq=seq)
    publish.run_changed_on_commit(run.pk, seq, run.status if status_changed else None)
    observe_stored(run, rows)  # spans and metrics, after commit
    if run.parent_id is not None or any(r.type.startswith("subtask_") for r in rows):
        from agentweb.runs.delegation import tree_changed_on_commit

        tree_changed_on_commit(run, (r.type for r in rows))
    return rows


def _insert_events(rows: list[RunEvent]) -> None:
    """``bulk_create(rows)`` as one INSERT ... VALUES. Django sends two or more rows as an
    UNNEST of arrays, and quoting a jsonb[] array escapes every quote of every event's
    JSON one by one: that cost a step more CPU time than the rest of its SQL."""
    now = timezone.now()  # RunEvent.at is auto_now_add
    params: list[Any] = []
    for row in rows:
        row.at = now
        data = connection.ops.adapt_json_value(row.data, DjangoJSONEncoder)  # as JSONField
        params += [row.run_id, row.seq, row.type, data, now]
    placeholders = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runs_runevent (run_id, seq, type, data, at) VALUES "  # noqa: S608
            + placeholders  # placeholders only
            + " RETURNING id",
            params,
        )
        for row, (pk,) in zip(rows, cursor.fetchall(), strict=True):  # as bulk_create does
            row.pk, row._state.adding = pk, False


def audit(action: str, *, actor: User | None, run: Run | None, **data: Any) -> None:
    AuditEntry.objects.create(action=action, actor=actor, run=run, data=data)


# --- runs -----------------------------------------------------------------------------


def do_create_run(
    *,
    user: User,
    task: str,
    agent_name: str | None = None,
    ticket_id: int | None = None,
) -> Run:
    allowed, why = may_start_run(user)
    if not allowed:
        raise NotAllowed(why)
    task = (task or "").strip()
    if not task and ticket_id is None:
        raise ActionError("task must not be empty")
    if len(task) > 20000:
        raise ActionError("task is too long (at most 20,000 characters)")
    name = agent_name or DEFAULT_AGENT
    agent = AgentProfile.objects.filter(name=name).first()
    if agent is None:
        known = ", ".join(AgentProfile.objects.values_list("name", flat=True)) or "none"
        raise ActionError(f"unknown agent {name!r}; known agents: {known}")
    ticket = None
    if ticket_id is not None:
        ticket = Ticket.objects.filter(pk=ticket_id).first()
        if ticket is None:
            raise NotFound(f"no ticket {ticket_id}")
        if not task:
            task = ticket.as_task()
    with transaction.atomic():
        if ticket is not None:
            # One active run per ticket: the ticket's row lock orders simultaneous starts.
            Ticket.objects.select_for_update().filter(pk=ticket.pk).first()
            active = active_run_for_ticket(ticket.pk)
            if active is not None:
                raise TicketBusy(
                    f"ticket {ticket.pk} already has run {active} in progress; follow or "
                    "cancel it before starting another",
                    extra={"active_run": active},
                )
        run = Run.objects.create(
            lease_expires_at=timezone.now() + QUEUE_GRACE,
            task=task,
            agent=agent,
            model=agent.model or settings.AGENTWEB_MODEL,
            ticket=ticket,
            created_by=user,
        )
        publish.send_on_commit(
            publish.RUNS_GROUP, {"type": "run.status", "run": run.pk, "status": run.status}
        )
        queue.enqueue_on_commit(run.pk)
    return run


def active_run_for_ticket(ticket_id: int) -> int | None:
    """The ticket's queued, running or waiting top-level run, if any (sub-runs it
    delegated to do not count)."""
    runs = Run.objects.filter(ticket_id=ticket_id, status__in=Run.ACTIVE)
    if any(f.name == "parent" for f in Run._meta.get_fields()):
        runs = runs.filter(**{"parent__isnull": True})
    return runs.order_by("-created_at").values_list("pk", flat=True).first()


def may_start_run(user: Any) -> tuple[bool, str]:
    if not user.has_perm("runs.add_run"):
        return False, "you may not start runs"
    return True, ""


def may_cancel(user: Any, run: Run) -> tuple[bool, str]:
    """Who may cancel: holders of ``cancel_run``, and whoever started the run."""
    if not (user.has_perm("runs.cancel_run") or run.created_by_id == user.pk):
        return False, "you may not cancel this run"
    return True, ""


def do_request_cancel(run: Run, user: User) -> Run:
    """Cancel a run: a waiting or queued one at once, a running one at its next step."""
    allowed, why = may_cancel(user, run)
    if not allowed:
        raise NotAllowed(why)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status not in Run.ACTIVE:
            raise Conflict(f"run {locked.pk} is already {locked.status}")
        audit("run_cancel_requested", actor=user, run=locked)
        if locked.status == Run.Status.RUNNING:
            Run.objects.filter(pk=locked.pk).update(cancel_requested=True)
            locked.cancel_requested = True
        else:
            finish_cancelled(locked, by=user.get_username())
    return locked


def finish_cancelled(run: Run, *, by: str = "") -> None:
    """Close a locked run as cancelled, with its pending approvals."""
    closed = Approval.objects.filter(run=run, status=Approval.Status.PENDING).update(
        status=Approval.Status.CANCELLED, decided_at=timezone.now(), comment="run cancelled"
    )
    run.status = Run.Status.CANCELLED
    run.finished_at = timezone.now()
    run.lease_owner, run.lease_expires_at = "", None
    run.save(update_fields=["status", "finished_at", "lease_owner", "lease_expires_at"])
    append_events(run, [ev.run_cancelled(by=by).to_json()])
    if closed:
        publish.approvals_changed_on_commit()
    from agentweb.runs import delegation

    delegation.run_ended(run)  # report to the parent; cancel the children


# --- agent profiles --------------------------------------------------------------------


def do_save_profile(
    profile: AgentProfile,
    *,
    actor: User | None,
    fields: Iterable[str] = (),
    cloned_from: str | None = None,
) -> AgentProfile:
    """Store an edited (or new) agent profile, with its audit lines: created or changed
    (which ``fields``), and a change of its approval policies with the policies before and
    after, whoever made it and however (page, API, import)."""
    actor = actor if getattr(actor, "pk", None) else None
    created = profile.pk is None
    with transaction.atomic():
        before: Any = {}
        if not created:
            before = (
                AgentProfile.objects.select_for_update()
                .filter(pk=profile.pk)
                .values_list("approval_policies", flat=True)
                .first()
            ) or {}
        profile.save()
        after = profile.approval_policies or {}
        audit(
            "agent_profile_created" if created else "agent_profile_changed",
            actor=actor,
            run=None,
            agent=profile.name,
            fields=sorted(fields),
            **({"cloned_from": cloned_from} if created else {}),
        )
        if before != after:
            audit(
                "approval_policies_changed",
                actor=actor,
                run=None,
                agent=profile.name,
                before=before,
                after=after,
            )
    return profile


def do_delete_profile(profile: AgentProfile, *, actor: User | None) -> None:
    """Delete a profile no run uses and no profile delegates to, with an audit line;
    ``ProfileInUse`` otherwise (the runs' history keeps naming it)."""
    actor = actor if getattr(actor, "pk", None) else None
    with transaction.atomic():
        runs = profile.runs.count()
        if runs:
            raise ProfileInUse(
                f"{profile.name} has {runs} run{'s' if runs != 1 else ''}; it is kept so their "
                "history keeps its profile (remove its tools or edit it instead)"
            )
        users = list(
            AgentProfile.objects.filter(delegates__contains=[profile.name]).values_list(
                "name", flat=True
            )
        )
        if users:
            raise ProfileInUse(f"{', '.join(users)} delegate to {profile.name}")
        name = profile.name
        profile.delete()
        audit("agent_profile_deleted", actor=actor, run=None, agent=name)


# --- approvals ------------------------------------------------------------------------


def may_decide(user: User, approval: Approval) -> tuple[bool, str]:
    if not user.has_perm("runs.decide_approval"):
        return False, "only approvers and admins decide tool calls"
    if approval.run.created_by_id == user.pk:
        return False, "you started this run; another person must decide its calls (four-eyes)"
    return True, ""


DecisionWord = Literal["approve", "reject"]


@dataclass(frozen=True, slots=True)
class CheckedDecision:
    """A decision that passed ``check_decide_approval``, ready to be recorded."""

    approval: Approval
    user: User
    decision: DecisionWord
    comment: str
    edited: dict[str, Any] | None  # the approver's arguments, validated
    final_args: dict[str, Any]  # what runs when approved


def check_decide_approval(
    *,
    approval_id: int,
    user: User,
    decision: str,
    comment: str = "",
    arguments: dict[str, Any] | None = None,
) -> CheckedDecision:
    """May ``user`` decide this approval, and is the input sane? Raises the refusal."""
    if decision not in ("approve", "reject"):
        raise ActionError("decision must be 'approve' or 'reject'")
    word: DecisionWord = "approve" if decision == "approve" else "reject"
    approval = Approval.objects.select_related("run").filter(pk=approval_id).first()
    if approval is None:
        raise NotFound(f"no approval {approval_id}")
    allowed, why = may_decide(user, approval)
    if not allowed:
        raise NotAllowed(why)
    comment = (comment or "").strip()[:4000]
    if word == "reject" and not comment:  # the model reads it: it must say why
        raise ReasonRequired("a rejection needs a reason: it goes back to the model")
    edited = None
    final_args = approval.arguments
    if word == "approve" and arguments is not None:
        if not isinstance(arguments, dict):
            raise InvalidArguments("arguments must be a JSON object")
        final_args = edited = validate_tool_arguments(approval.tool, arguments)
    return CheckedDecision(approval, user, word, comment, edited, final_args)


def do_decide_approval(
    *,
    approval_id: int,
    user: User,
    decision: str,
    comment: str = "",
    arguments: dict[str, Any] | None = None,
) -> Approval:
    """Approve (optionally with edited arguments) or reject a pending call, exactly once:
    ``check_decide_approval``, then ``record_decision``."""
    checked = check_decide_approval(
        approval_id=approval_id, user=user, decision=decision, comment=comment, arguments=arguments
    )
    return record_decision(checked)


def record_decision(checked: CheckedDecision) -> Approval:
    """Record a checked decision. It is a conditional UPDATE on the pending row: of many
    simultaneous deciders exactly one wins and only the winner enqueues the resume."""
    approval, user, comment = checked.approval, checked.user, checked.comment
    edited, final_args = checked.edited, checked.final_args
    now = timezone.now()
    approved = checked.decision == "approve"
    status = Approval.Status.APPROVED if approved else Approval.Status.REJECTED
    with transaction.atomic():
        won = Approval.objects.filter(
            pk=approval.pk, status=Approval.Status.PENDING, expires_at__gt=now
        ).update(
            status=status,
            decided_by=user,
            decided_at=now,
            comment=comment,
            edited_arguments=edited,
            approved_hash=arguments_hash(final_args) if approved else "",
        )
        if not won:
            approval.refresh_from_db()
            if approval.status == Approval.Status.PENDING:
                raise Conflict("this approval has expired")
            raise Conflict(f"this approval was already {approval.status}")
        approval.refresh_from_db()
        run = Run.objects.select_for_update().get(pk=approval.run_id)
        audit(
            f"approval_{status}",
            actor=user,
            run=run,
            approval=approval.pk,
            call_id=approval.call_id,
            tool=approval.tool,
            arguments=approval.arguments,
            edited_arguments=edited,
            comment=comment,
        )
        decided = ev.approval_decided(
            call_id=approval.call_id,
            tool=approval.tool,
            decision="approved" if approved else "rejected",
            comment=comment,
            arguments=final_args,
            edited=edited is not None,
            by=user.get_username(),
        )
        append_events(run, [decided.to_json()])
        publish.approvals_changed_on_commit()
        _resume_if_ready(run)
    return approval


def _resume_if_ready(run: Run) -> None:
    """A waiting run goes back to the queue once none of its approvals is pending."""
    if run.status != Run.Status.WAITING_APPROVAL:
        return
    if Approval.objects.filter(run=run, status=Approval.Status.PENDING).exists():
        return
    updated = Run.objects.filter(pk=run.pk, status=Run.Status.WAITING_APPROVAL).update(
        status=Run.Status.QUEUED, lease_expires_at=timezone.now() + QUEUE_GRACE
    )
    if updated:
        run.status = Run.Status.QUEUED
        queue.enqueue_on_commit(run.pk)


def validate_tool_arguments(tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    from agentweb.runs.agents import registry

    tool = registry().get(tool_name)
    if tool is None:
        raise InvalidArguments(f"tool {tool_name!r} is not loaded in this installation")
    try:
        validated = dict(tool.validate(arguments))
    except ToolArgumentError as exc:  # details: what is wrong per argument, for a form
        raise InvalidArguments(
            f"arguments do not fit {tool_name}: {exc}", details={"fields": exc.fields}
        ) from exc
    except Exception as exc:
        raise InvalidArguments(f"arguments do not fit {tool_name}: {exc}") from exc
    try:  # the tool's own rules on what the arguments mean (amount > 0 ...)
        tool.check_arguments(validated)
    except ToolError as exc:
        raise InvalidArguments(str(exc)) from exc
    return validated


def do_expire_approvals(now: Any = None) -> int:
    """Pending approvals past their expiry count as rejected with that reason."""
    now = now or timezone.now()
    expired = 0
    for approval_id in Approval.objects.filter(
        status=Approval.Status.PENDING, expires_at__lte=now
    ).values_list("pk", flat=True):
        with transaction.atomic():
            won = Approval.objects.filter(pk=approval_id, status=Approval.Status.PENDING).update(
                status=Approval.Status.EXPIRED,
                decided_at=now,
                comment="The approval request expired before anyone decided it.",
            )
            if not won:
                continue
            expired += 1
            approval = Approval.objects.get(pk=approval_id)
            run = Run.objects.select_for_update().get(pk=approval.run_id)
            audit(
                "approval_expired",
                actor=None,
                run=run,
                call_id=approval.call_id,
                tool=approval.tool,
                arguments=approval.arguments,
            )
            decided = ev.approval_decided(
                call_id=approval.call_id,
                tool=approval.tool,
                decision="expired",
                comment=approval.comment,
                arguments=approval.arguments,
                by=None,
            )
            append_events(run, [decided.to_json()])
            publish.approvals_changed_on_commit()
            _resume_if_ready(run)
    return expired


def approval_expiry() -> Any:
    return timezone.now() + timedelta(hours=settings.AGENTWEB_APPROVAL_TTL_HOURS)


# --- recovery -------------------------------------------------------------------------


def do_requeue_stale_runs() -> list[int]:
    """Runs whose worker stopped renewing its lease go back to the queue (beat job).

    Recovery does not wait for the broker's visibility timeout: the lease is ours."""
    now = timezone.now()
    stale = list(
        Run.objects.filter(
            status__in=[Run.Status.RUNNING, Run.Status.QUEUED], lease_expires_at__lt=now
        ).values_list("pk", flat=True)[:500]
    )
    with transaction.atomic():
        # Queued runs get a new pick-up deadline so the next tick does not send them again.
        Run.objects.filter(pk__in=stale, status=Run.Status.QUEUED).update(
            lease_expires_at=now + QUEUE_GRACE
        )
        for run_id in stale:
            queue.enqueue_on_commit(run_id)
    if stale:
        log.warning("re-enqueued %d runs whose lease expired: %s", len(stale), stale)
    return stale


def add_usage(current: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's usage after the model calls among ``events``."""
    usage = dict(current or {})
    for event in events:
        if event["type"] != "model_called":
            continue
        tokens = event["data"].get("tokens") or {}
        usage["input_tokens"] = int(usage.get("input_tokens", 0)) + int(tokens.get("input", 0))
        usage["output_tokens"] = int(usage.get("output_tokens", 0)) + int(tokens.get("output", 0))
        usage["model_calls"] = int(usage.get("model_calls", 0)) + 1
        cost = float(usage.get("cost_usd", 0)) + float(event["data"].get("cost_usd") or 0)
        usage["cost_usd"] = round(cost, 6)
    return usage
