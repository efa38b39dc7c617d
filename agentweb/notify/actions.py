"""Approvals reach people where they are (DESIGN §12): a mail to everyone who may decide,
a Slack message, signed webhooks; escalation and one reminder. Everything here queues
deliveries in the caller's transaction (``agentweb.outbox``): the step or decision that
stored the event commits them, a worker sends them, and nothing here waits on a channel.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from datetime import datetime, timedelta
from email.utils import formataddr
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone

from agentweb.notify.cards import ApprovalCard, approval_card
from agentweb.notify.messages import approval_mail, slack_request
from agentweb.notify.models import ApprovalLink, ApprovalNotice, SlackIdentity, hash_token
from agentweb.outbox import actions as outbox
from agentweb.outbox import lanes
from agentweb.runs import actions as runs
from agentweb.runs import queue
from agentweb.runs.models import Approval, Run, arguments_hash
from agentweb.runs.people import people_for

log = logging.getLogger(__name__)

ABOUT = "approval"  # deliveries of an approval's notifications: ("approval", id)


# --- who ---------------------------------------------------------------------------------


def recipients(approval: Approval) -> list[User]:
    """Everyone who may decide the approval (``runs.deciders``: the permission, its team,
    never the run's starter) and has an email address."""
    return list(runs.deciders(approval).exclude(email="").order_by("pk"))


def escalation_recipients(approval: Approval) -> list[User]:
    """The members of ``AGENTWEB_ESCALATION_GROUP`` who may decide the approval."""
    name = settings.AGENTWEB_ESCALATION_GROUP
    if not name:
        return []
    group = Group.objects.filter(name=name).first()
    if group is None:
        log.warning("AGENTWEB_ESCALATION_GROUP names %r, which is not a group", name)
        return []
    return list(
        runs.deciders(approval).filter(groups=group).exclude(email="").order_by("pk").distinct()
    )


def slack_user(slack_id: str) -> User | None:
    """The agentweb user behind a Slack user id: ``AGENTWEB_SLACK_USERS`` first, then the
    Slack id an admin set on the user."""
    username = settings.AGENTWEB_SLACK_USERS.get(slack_id)
    if username is not None:
        return User.objects.filter(username=username, is_active=True).first()
    found = SlackIdentity.objects.select_related("user").filter(slack_id=slack_id).first()
    return found.user if found is not None and found.user.is_active else None


# --- mail and Slack ------------------------------------------------------------------------


def link_url(approval_id: int, raw_token: str) -> str:
    return f"{settings.AGENTWEB_SITE_URL}/approvals/{approval_id}/?t={raw_token}"


def _mail(approval: Approval, user: User, card: ApprovalCard, purpose: str) -> None:
    raw = secrets.token_urlsafe(32)
    ApprovalLink.objects.create(
        approval=approval,
        user=user,
        token_hash=hash_token(raw),
        arguments_hash=arguments_hash(approval.proposal),
        purpose=purpose,
        expires_at=approval.expires_at,
    )
    mail = approval_mail(card, link_url(approval.pk, raw), purpose)
    outbox.do_queue_email(
        to=formataddr((user.get_full_name() or user.get_username(), user.email)),
        subject=mail.subject,
        text=mail.text,
        html=mail.html,
        headers={"Auto-Submitted": "auto-generated"},
        to_label=f"{user.get_username()} <{user.email}>",
        topic=f"approval.{purpose}",
        about=(ABOUT, approval.pk),
    )


def _slack(approval: Approval, card: ApprovalCard, purpose: str) -> bool:
    url = settings.AGENTWEB_SLACK_WEBHOOK_URL
    if not url:
        return False
    outbox.do_queue_slack(
        url=url,
        payload=slack_request(card, arguments_hash(approval.proposal), purpose),
        to_label="Slack",
        topic=f"approval.{purpose}",
        about=(ABOUT, approval.pk),
    )
    return True


def _tell(approval: Approval, users: list[User], purpose: str) -> bool:
    """Mail ``users`` and post to Slack; True when Slack was told."""
    needed, given = quorum(approval)
    card = approval_card(approval, needed=needed, given=given)
    if settings.AGENTWEB_SMTP is not None:
        for user in users:
            _mail(approval, user, card, purpose)
    return _slack(approval, card, purpose)


def quorum(approval: Approval) -> tuple[int, int]:
    """(approvals needed, approvals given)."""
    return approval.approvals_needed, approval.approvals_given()


def escalate_after(approval: Approval) -> float | None:
    """Minutes after which a still pending request escalates: the policy's
    ``escalate_after_minutes``, else ``AGENTWEB_ESCALATE_AFTER_MINUTES``; None when off."""
    if not settings.AGENTWEB_ESCALATION_GROUP:
        return None
    own = people_for(approval.run.agent.approval_policies, approval.tool).escalate_after_minutes
    return own or settings.AGENTWEB_ESCALATE_AFTER_MINUTES or None


def first_recipients(approval: Approval, escalates: bool) -> list[User]:
    """Who is mailed when the request is made: everyone who may decide, except the
    escalation group's members when it will escalate (they hear of it if nobody decided
    in time), unless that leaves nobody."""
    users = recipients(approval)
    if not escalates:
        return users
    held = {u.pk for u in escalation_recipients(approval)}
    first = [u for u in users if u.pk not in held]
    return first or users


ANNOUNCE_TASK = "agentweb.notify.tasks.announce"
ANNOUNCE_LANE = "notify"
#: A request not announced this long after it was made is announced by beat's sweep (its
#: wake-up was lost with a worker, or the broker was away).
ANNOUNCE_GRACE = timedelta(seconds=15)


def do_notify_requested(approval: Approval) -> None:
    """A new (or re-opened) approval request, in the transaction that stored its
    ``approval_requested`` event: its notice (when to escalate and remind) and the
    ``approval.requested`` webhooks (in order with the run's other events). The mails and
    the Slack message are made after commit (``do_announce``, on a worker's lane), so a
    run's step never waits for them, however many people are told."""
    minutes = escalate_after(approval)
    now = timezone.now()
    remind = timedelta(minutes=settings.AGENTWEB_APPROVAL_REMIND_MINUTES)
    remind_at: datetime | None = approval.expires_at - remind
    if remind_at is not None and remind_at <= now:
        remind_at = None  # the request is shorter than the reminder's notice
    # Without mail and Slack there is nothing to announce (webhooks go below).
    channels = settings.AGENTWEB_SMTP is not None or bool(settings.AGENTWEB_SLACK_WEBHOOK_URL)
    ApprovalNotice.objects.update_or_create(
        approval=approval,
        defaults={
            "announced_at": None if channels else now,
            "notified": [],
            "slack": False,
            "escalate_at": now + timedelta(minutes=minutes) if minutes else None,
            "escalated_at": None,
            "remind_at": remind_at,
            "reminded_at": None,
        },
    )
    send_event("approval.requested", approval.run, approval=approval)
    if channels:
        approval_id = approval.pk
        transaction.on_commit(lambda: _wake_announce(approval_id), robust=True)


def _wake_announce(approval_id: int) -> None:
    if lanes.in_worker():
        lanes.submit(ANNOUNCE_LANE, approval_id, announce_in_lane)
        return
    try:
        queue.send(ANNOUNCE_TASK, approval_id)
    except Exception as exc:  # the sweep announces it
        log.warning("approval %s: could not wake a worker (%s)", approval_id, exc)


def announce_in_lane(approval_id: int) -> None:
    try:
        do_announce(approval_id)
    finally:
        connections.close_all()


def do_announce(approval_id: int, now: datetime | None = None) -> bool:
    """Mail everyone who may decide the approval (but the escalation group's members when
    it will escalate) and post it to Slack, once: the notice is claimed by a conditional
    UPDATE. False when it was not ours (announced already, or no longer pending)."""
    now = now or timezone.now()
    with transaction.atomic():
        won = ApprovalNotice.objects.filter(
            approval_id=approval_id, announced_at__isnull=True
        ).update(announced_at=now)
        if not won:
            return False
        approval = (
            Approval.objects.select_related("run__agent", "run__created_by")
            .filter(pk=approval_id, status=Approval.Status.PENDING)
            .first()
        )
        if approval is None:
            return False
        minutes = escalate_after(approval)
        mail_on = settings.AGENTWEB_SMTP is not None
        users = first_recipients(approval, bool(minutes)) if mail_on else []
        told_slack = _tell(approval, users, ApprovalLink.Purpose.REQUESTED)
        ApprovalNotice.objects.filter(approval_id=approval_id).update(
            notified=[u.pk for u in users], slack=told_slack
        )
    return True


def _announce_late(now: datetime) -> int:
    late = ApprovalNotice.objects.filter(
        announced_at__isnull=True,
        approval__status=Approval.Status.PENDING,
        approval__requested_at__lt=now - ANNOUNCE_GRACE,
    ).values_list("approval_id", flat=True)[:200]
    return sum(1 for approval_id in list(late) if do_announce(approval_id, now))


def do_escalate_and_remind(now: datetime | None = None) -> int:
    """Beat: escalate approvals still pending past their escalation time (once), and send
    the one reminder before expiry (once). Each is claimed by a conditional UPDATE."""
    now = now or timezone.now()
    done = _announce_late(now)
    pending = Q(
        approval__status=Approval.Status.PENDING,
        approval__expires_at__gt=now,
        announced_at__isnull=False,
    )
    due = ApprovalNotice.objects.filter(
        pending, escalated_at__isnull=True, escalate_at__isnull=False, escalate_at__lte=now
    ).values_list("pk", flat=True)[:200]
    for pk in list(due):
        if ApprovalNotice.objects.filter(pk=pk, escalated_at__isnull=True).update(escalated_at=now):
            notice = ApprovalNotice.objects.select_related("approval__run").get(pk=pk)
            users = escalation_recipients(notice.approval)
            if not users and not settings.AGENTWEB_SLACK_WEBHOOK_URL:
                log.warning("approval %s: escalation reaches nobody", notice.approval_id)
            _tell(notice.approval, users, ApprovalLink.Purpose.ESCALATED)
            done += 1
    due = ApprovalNotice.objects.filter(
        pending, reminded_at__isnull=True, remind_at__isnull=False, remind_at__lte=now
    ).values_list("pk", flat=True)[:200]
    for pk in list(due):
        if ApprovalNotice.objects.filter(pk=pk, reminded_at__isnull=True).update(reminded_at=now):
            notice = ApprovalNotice.objects.select_related("approval__run").get(pk=pk)
            users = list(
                runs.deciders(notice.approval).filter(pk__in=notice.notified).order_by("pk")
            )
            needed, given = quorum(notice.approval)
            card = approval_card(notice.approval, needed=needed, given=given)
            if settings.AGENTWEB_SMTP is not None:
                for user in users:
                    _mail(notice.approval, user, card, ApprovalLink.Purpose.REMINDER)
            if notice.slack:
                _slack(notice.approval, card, ApprovalLink.Purpose.REMINDER)
            done += 1
    return done


# --- webhooks out ---------------------------------------------------------------------------


def webhook_secret(url: str) -> str:
    """The secret a webhook URL's POSTs are signed with (``manage.py webhooks secret URL``):
    derived from ``SECRET_KEY`` and the URL, so nothing needs storing."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, b"agentweb-webhook\x00" + url.encode(), hashlib.sha256).hexdigest()


def approval_json(approval: Approval) -> dict[str, Any]:
    """An approval as ``GET /api/approvals`` gives it, with its notifications."""
    return {**approval.as_json(), "notifications": notifications(approval.pk)}


def notifications(approval_id: int) -> list[dict[str, Any]]:
    """What reached whom about an approval: ``[{"channel", "to", "state", "error", ...}]``."""
    return [dict(n) for n in outbox.notifications_about(ABOUT, [approval_id])[approval_id]]


def webhooks_configured() -> bool:
    """Whether ``send_event`` sends anything (``AGENTWEB_WEBHOOKS`` names a URL)."""
    return bool(settings.AGENTWEB_WEBHOOKS)


def send_event(
    event: str, run: Run, *, approval: Approval | None = None, status: str | None = None
) -> None:
    """Queue ``event`` for every ``AGENTWEB_WEBHOOKS`` URL, in order per run and URL."""
    if not webhooks_configured():
        return
    urls = settings.AGENTWEB_WEBHOOKS
    data: dict[str, Any] = {"run": run.pk}
    if approval is not None:
        data["approval"] = approval_json(approval)
    if status is not None:
        data["status"] = status
    at = timezone.now().isoformat()
    about = (ABOUT, approval.pk) if approval is not None else ("run", run.pk)
    for url in urls:
        outbox.do_queue_webhook(
            url=url,
            secret=webhook_secret(url),
            payload={"event": event, "delivery_id": None, "at": at, "data": data},
            to_label=url,
            topic=event,
            about=about,
            ordering_key=f"run:{run.pk}:{url}",
        )
