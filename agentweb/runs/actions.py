"""Every write to runs happens here: state and events in one transaction, published after.

Views, the API, commands and tasks parse their input, call one of these, and render.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agentweb.runs import lifecycle, publish, toolset, versions
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
from agentweb.runs.lifecycle import approval_expiry as approval_expiry  # known here too
from agentweb.runs.lifecycle import finish_cancelled as finish_cancelled
from agentweb.runs.models import AgentProfile, Approval, ApprovalVote, Run, arguments_hash
from agentweb.runs.queue import QUEUE_GRACE as QUEUE_GRACE
from agentweb.runs.store import append_events, audit
from agentweb.runtime import events as ev
from agentweb.runtime.tools import ToolArgumentError, ToolError
from agentweb.teams.scope import who_sees
from agentweb.tickets.models import Ticket

log = logging.getLogger(__name__)

DEFAULT_AGENT = "ticket-assistant"


# --- runs -----------------------------------------------------------------------------


def do_create_run(
    *,
    user: User,
    task: str,
    agent_name: str | None = None,
    ticket_id: int | None = None,
    mode: str = Run.Mode.NORMAL,
) -> Run:
    """A new queued run. ``mode`` "dry": its medium/high-risk calls never execute; it is
    not counted as the ticket's active run (DESIGN §14)."""
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
        ticket = Ticket.objects.visible_to(user).filter(pk=ticket_id).first()
        if ticket is None:  # another team's ticket is no ticket to this person
            raise NotFound(f"no ticket {ticket_id}")
        if not task:
            task = ticket.as_task()
    if mode not in Run.Mode.values:
        raise ActionError(f"unknown mode {mode!r}; one of {', '.join(Run.Mode.values)}")
    fields = {
        "task": task,
        "agent": agent,
        "agent_version": versions.current(agent).n,
        "mode": mode,
        "model": agent.model or settings.AGENTWEB_MODEL,
        "ticket": ticket,
        "created_by": user,
    }
    if ticket is None or mode == Run.Mode.DRY:
        # Nothing to check against other runs: the INSERT is the whole transaction, and
        # PostgreSQL commits it as it answers (no BEGIN and COMMIT round trips of their
        # own between the run's creation and the worker's wake-up, sent as it commits).
        return lifecycle.create(**fields)
    with transaction.atomic():
        # One active run per ticket: the ticket's row lock orders simultaneous starts.
        Ticket.objects.select_for_update().filter(pk=ticket.pk).first()
        active = active_run_for_ticket(ticket.pk)
        if active is not None:
            raise TicketBusy(
                f"ticket {ticket.pk} already has run {active} in progress; follow or "
                "cancel it before starting another",
                extra={"active_run": active},
            )
        return lifecycle.create(**fields)


def active_run_for_ticket(ticket_id: int) -> int | None:
    """The ticket's queued, running or waiting top-level run, if any (sub-runs it
    delegated to and dry runs do not count)."""
    runs = Run.objects.filter(ticket_id=ticket_id, status__in=Run.ACTIVE).exclude(mode=Run.Mode.DRY)
    if any(f.name == "parent" for f in Run._meta.get_fields()):
        runs = runs.filter(**{"parent__isnull": True})
    return runs.order_by("-created_at").values_list("pk", flat=True).first()


def may_start_run(user: Any) -> tuple[bool, str]:
    if not user.has_perm("runs.add_run"):
        return False, "you may not start runs"
    return True, ""


def may_cancel(user: Any, run: Run) -> tuple[bool, str]:
    """Who may cancel: holders of ``cancel_run``, and whoever started the run. (Of a run
    the user sees: ``do_request_cancel`` looks it up through ``Run.objects.visible_to``;
    pages ask this without a query.)"""
    if not (user.has_perm("runs.cancel_run") or run.created_by_id == user.pk):
        return False, "you may not cancel this run"
    return True, ""


def do_request_cancel(run: Run, user: User) -> Run:
    """Cancel a run: a waiting or queued one at once, a running one at its next step."""
    allowed, why = may_cancel(user, run)
    if not allowed:
        raise NotAllowed(why)
    if not Run.objects.visible_to(user).filter(pk=run.pk).exists():
        raise NotFound(f"no run {run.pk}")  # another team's run is no run to this person
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status not in Run.ACTIVE:
            raise Conflict(f"run {locked.pk} is already {locked.status}")
        audit("run_cancel_requested", actor=user, run=locked)
        lifecycle.request_cancel(locked, by=user.get_username())
    return locked


# --- agent profiles --------------------------------------------------------------------


def may_change_profiles(user: Any, *, creating: bool = False) -> tuple[bool, str]:
    """Who may write agent profiles: admins (``add_agentprofile`` to create one,
    ``change_agentprofile`` to change or delete one). ``None`` is the installation itself
    (``manage.py agents import``, the seeding), which may."""
    if user is None:
        return True, ""
    if not user.has_perm("runs.add_agentprofile" if creating else "runs.change_agentprofile"):
        return False, "only admins may change agent profiles"
    return True, ""


def check_change_profiles(user: Any, *, creating: bool = False) -> None:
    """``may_change_profiles`` or ``NotAllowed``: every profile write asks it first."""
    allowed, why = may_change_profiles(user, creating=creating)
    if not allowed:
        raise NotAllowed(why)


def do_save_profile(
    profile: AgentProfile,
    *,
    actor: User | None,
    fields: Iterable[str] = (),
    cloned_from: str | None = None,
    restored_from: int | None = None,
) -> AgentProfile:
    """Store an edited (or new) agent profile, with its audit lines: created or changed
    (which ``fields``), and a change of its approval policies with the policies before and
    after, whoever made it and however (page, API, import). ``actor`` None: the
    installation itself (``agents import``); a person must be allowed to
    (``may_change_profiles``). Every save writes the profile's next immutable version
    (``versions.record``; ``restored_from``: the version a restore copied)."""
    created = profile.pk is None
    check_change_profiles(actor, creating=created)
    actor = actor if getattr(actor, "pk", None) else None
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
        version = versions.record(profile, actor=actor, restored_from=restored_from)
        after = profile.approval_policies or {}
        audit(
            "agent_profile_created" if created else "agent_profile_changed",
            actor=actor,
            run=None,
            agent=profile.name,
            fields=sorted(fields),
            version=version.n,
            **({"cloned_from": cloned_from} if created else {}),
            **({"restored_from": restored_from} if restored_from else {}),
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
    ``ProfileInUse`` otherwise (the runs' history keeps naming it). Who may: as for
    ``do_save_profile``."""
    check_change_profiles(actor)
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
    """The rule for an approval the user sees (``check_decide_approval`` looks it up
    through ``Approval.objects.visible_to``: another team's is not found); pages ask it
    per card without a query."""
    if not user.has_perm("runs.decide_approval"):
        return False, "only approvers and admins decide tool calls"
    if approval.run.created_by_id == user.pk:
        return False, "you started this run; another person must decide its calls (four-eyes)"
    return True, ""


def deciders(approval: Approval) -> Any:
    """Everyone who may decide ``approval`` (a QuerySet of active users), by the rules of
    ``may_decide``: the permission, seeing the run (its team, once teams exist; admins
    always), not its starter. Whom to tell about a new request."""
    run = approval.run
    queue = run.ticket.queue if run.ticket_id is not None and run.ticket is not None else None
    backend = "agentweb.accounts.backends.LocalBackend"  # Django's permission rules
    return (
        User.objects.with_perm("runs.decide_approval", backend=backend)
        .filter(pk__in=User.objects.with_perm("runs.view_all_runs", backend=backend).values("pk"))
        .filter(who_sees(queue, run.created_by_id))
        .exclude(pk=run.created_by_id)
        .distinct()
    )


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
    lock: bool = False,
) -> CheckedDecision:
    """May ``user`` decide this approval, and is the input sane? Raises the refusal.
    ``lock``: read the approval's row locked (inside the caller's transaction)."""
    if decision not in ("approve", "reject"):
        raise ActionError("decision must be 'approve' or 'reject'")
    word: DecisionWord = "approve" if decision == "approve" else "reject"
    visible = Approval.objects.visible_to(user).select_related("run")
    if lock:
        visible = visible.select_for_update(of=("self",))
    approval = visible.filter(pk=approval_id).first()
    if approval is None:  # another team's approval is no approval to this person
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
    ``check_decide_approval`` and ``record_decision`` in one transaction, the check's read
    of the approval the locking one."""
    with transaction.atomic():
        checked = check_decide_approval(
            approval_id=approval_id,
            user=user,
            decision=decision,
            comment=comment,
            arguments=arguments,
            lock=True,
        )
        return _record_locked(checked, checked.approval)


class AlreadyDecidedByYou(Conflict):
    """A person decides a call once: a quorum needs other people."""

    code = "already_approved"


def record_decision(checked: CheckedDecision) -> Approval:
    """Record a checked decision, exactly once. The pending row is locked: of many
    simultaneous deciders (any channel) the first decides, the others find it decided,
    and only the decision that completes it enqueues the resume.

    A quorum (``approvals_needed`` > 1): each approval is a vote of a distinct person; the
    call is approved by the vote that completes it; one rejection rejects it; the same
    person again is refused. The first approver's edited arguments are what the others
    approve (a later one may not change them)."""
    with transaction.atomic():
        pk = checked.approval.pk
        locked = Approval.objects.select_for_update().filter(pk=pk).first()
        if locked is None:
            raise NotFound(f"no approval {pk}")
        return _record_locked(checked, locked)


def _record_locked(checked: CheckedDecision, locked: Approval) -> Approval:
    """``record_decision`` on the approval's locked row, in the caller's transaction."""
    user, comment = checked.user, checked.comment
    now = timezone.now()
    approved = checked.decision == "approve"
    if locked.status != Approval.Status.PENDING:
        raise Conflict(f"this approval was already {locked.status}")
    if locked.expires_at <= now:
        raise Conflict("this approval has expired")
    votes: list[int] = []  # a call one approval decides has none while it is pending
    if locked.approvals_needed > 1:
        votes = list(ApprovalVote.objects.filter(approval=locked).values_list("user_id", flat=True))
    if user.pk in votes:
        raise AlreadyDecidedByYou(
            f"you already approved this call ({len(votes)} of {locked.approvals_needed}); "
            "another person must approve it too"
        )
    run = Run.objects.select_for_update().get(pk=locked.run_id)
    # What the decision's answer shows, known here: its run, and the approvals given
    # (the votes before this one, and this one's own if it approves).
    locked.run = run
    locked.approvals_given_n = len(votes) + (1 if approved else 0)  # type: ignore[attr-defined]
    if not approved:
        return _record_final(locked, run, checked, now, approved=False)
    edited = checked.edited
    if votes and edited is not None and arguments_hash(edited) != arguments_hash(locked.proposal):
        raise Conflict(
            "another person already approved these arguments: approve them as they are, or reject"
        )
    final_args = edited if edited is not None else locked.proposal
    ApprovalVote.objects.create(
        approval=locked,
        user=user,
        arguments_hash=arguments_hash(final_args),
        edited=edited is not None,
        comment=comment,
    )
    given = len(votes) + 1
    if given >= locked.approvals_needed:
        return _record_final(locked, run, checked, now, approved=True, final_args=final_args)
    if edited is not None:
        Approval.objects.filter(pk=locked.pk).update(edited_arguments=edited)
        locked.edited_arguments = edited
    audit(
        "approval_given",
        actor=user,
        run=run,
        approval=locked.pk,
        call_id=locked.call_id,
        tool=locked.tool,
        given=given,
        needed=locked.approvals_needed,
        edited_arguments=edited,
        comment=comment,
    )
    given_event = ev.approval_given(
        call_id=locked.call_id,
        tool=locked.tool,
        by=user.get_username(),
        given=given,
        needed=locked.approvals_needed,
        edited=edited is not None,
    )
    append_events(run, [given_event.to_json()], status_changed=False)
    publish.approvals_changed_on_commit()
    return locked


def _record_final(
    approval: Approval,
    run: Run,
    checked: CheckedDecision,
    now: Any,
    *,
    approved: bool,
    final_args: dict[str, Any] | None = None,
) -> Approval:
    """The decision itself, on the locked row: status, audit line, event, resume."""
    user, comment = checked.user, checked.comment
    status = Approval.Status.APPROVED if approved else Approval.Status.REJECTED
    final = final_args if final_args is not None else approval.proposal
    # the arguments a person changed: this approver's, or a quorum's first approver's
    edited = (checked.edited or approval.edited_arguments) if approved else None
    fields = {
        "status": status,
        "decided_by": user,
        "decided_at": now,
        "comment": comment,
        "edited_arguments": edited if approved else approval.edited_arguments,  # kept on reject
        "approved_hash": arguments_hash(final) if approved else "",
    }
    Approval.objects.filter(pk=approval.pk).update(**fields)
    for name, value in fields.items():  # the locked row as it now is, without reading it
        setattr(approval, name, value)
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
        arguments=final if approved else checked.final_args,
        edited=edited is not None,
        by=user.get_username(),
    )
    # its wait, for the metrics after commit: known here, not read again
    waited = {approval.call_id: (approval.requested_at, now)}
    append_events(run, [decided.to_json()], approval_times=waited, save_seq=False)
    publish.approvals_changed_on_commit()
    # the run's new last seq goes with its resumption when it resumes: one UPDATE
    if not lifecycle.resume_if_decided(run, last_seq=run.last_seq):
        Run.objects.filter(pk=run.pk).update(last_seq=run.last_seq)
    return approval


def validate_tool_arguments(tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    tool = toolset.registry().get(tool_name)
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
            lifecycle.resume_if_decided(run)
    return expired


# --- recovery -------------------------------------------------------------------------


def do_requeue_stale_runs() -> list[int]:
    """Runs whose worker stopped renewing its lease go back to the queue (the sweep)."""
    return lifecycle.requeue_stale()
