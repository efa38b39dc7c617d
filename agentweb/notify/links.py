"""Decision links in mails: ``/approvals/<id>/?t=<token>``. Opening one decides nothing
(mail scanners follow links); the POST decides, as the addressee, once."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agentweb.notify.models import ApprovalLink, hash_token
from agentweb.runs import actions as runs
from agentweb.runs.models import Approval, arguments_hash

#: A token is 43 characters of URL-safe base64; anything much longer is not one of ours.
MAX_TOKEN_CHARS = 100


@dataclass
class LinkRefused(Exception):
    """Why a link does nothing; ``status`` for the page."""

    status: int
    title: str
    message: str


def _decided_words(approval: Approval) -> str:
    if approval.status == Approval.Status.EXPIRED:
        return "It expired before anyone decided it."
    if approval.status == Approval.Status.CANCELLED:
        return "Its run was cancelled."
    who = approval.decided_by.get_username() if approval.decided_by else "someone"
    return f"It was already {approval.status} by {who}."


def check_link(approval_id: int, raw: str) -> ApprovalLink:
    """The link behind ``raw`` if it may still decide ``approval_id``; else
    ``LinkRefused`` saying why (altered, used, expired, decided, changed)."""
    if not raw or len(raw) > MAX_TOKEN_CHARS:
        raise LinkRefused(404, "This link is not valid", "The link is incomplete or altered.")
    link = (
        ApprovalLink.objects.select_related("approval__run__agent", "approval__decided_by", "user")
        .filter(token_hash=hash_token(raw))
        .first()
    )
    if link is None or link.approval_id != approval_id:
        raise LinkRefused(
            404,
            "This link is not valid",
            "It is not a link we sent, or it was altered on its way (copy it whole from the "
            "mail). Nothing was decided.",
        )
    approval = link.approval
    if link.used_at is not None:
        raise LinkRefused(
            410, "This link was already used", f"Each link works once. {_decided_words(approval)}"
        )
    if approval.status != Approval.Status.PENDING:
        raise LinkRefused(409, "Already decided", _decided_words(approval))
    now = timezone.now()
    if link.expires_at <= now or approval.expires_at <= now:
        raise LinkRefused(
            410, "This request has expired", "Its time ran out; an expired request is denied."
        )
    if link.arguments_hash != arguments_hash(approval.proposal):
        raise LinkRefused(
            409,
            "This request changed",
            "The call's arguments are not the ones in your mail; decide it in agentweb.",
        )
    return link


def do_decide_by_link(link: ApprovalLink, user: User, decision: str, comment: str = "") -> Approval:
    """Decide as the link's addressee, using the link up (one decision per link).
    Raises ``LinkRefused`` for someone else's link, ``runs.ActionError`` as any decision."""
    if user.pk != link.user_id:
        raise LinkRefused(
            403,
            "This link is someone else's",
            f"It was sent to {link.user.get_username()}; you are signed in as "
            f"{user.get_username()}. Nothing was decided.",
        )
    with transaction.atomic():
        won = ApprovalLink.objects.filter(pk=link.pk, used_at__isnull=True).update(
            used_at=timezone.now()
        )
        if not won:
            raise LinkRefused(410, "This link was already used", "Each link works once.")
        # a refusal here (already decided, no permission ...) leaves the link unused
        return runs.do_decide_approval(
            approval_id=link.approval_id, user=user, decision=decision, comment=comment
        )
