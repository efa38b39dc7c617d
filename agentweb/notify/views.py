"""The approval page behind a mail's link, and Slack's interaction callback."""

from __future__ import annotations

import json
import logging
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from agentweb.notify import actions as notify
from agentweb.notify import slack
from agentweb.notify.cards import approval_card
from agentweb.notify.links import LinkRefused, check_link, do_decide_by_link
from agentweb.runs import actions as runs
from agentweb.runs.models import Approval, Run
from agentweb.signing import SLACK_SIGNATURE, SLACK_TIMESTAMP, BadSignature, verify_slack

log = logging.getLogger(__name__)


def _refused(request: HttpRequest, refusal: LinkRefused, approval_id: int) -> HttpResponse:
    return render(
        request,
        "notify/link_refused.html",
        {"refusal": refusal, "approval_id": approval_id},
        status=refusal.status,
    )


@require_http_methods(["GET", "POST"])
def approval_page(request: HttpRequest, approval_id: int) -> HttpResponse:
    """``/approvals/<id>/``: with ``?t=`` the mailed link (GET shows, POST decides as the
    addressee); without it, the approval's own page for a signed-in user."""
    raw = request.GET.get("t", "")
    if not raw:
        return _plain_page(request, approval_id)
    try:
        link = check_link(approval_id, raw)
    except LinkRefused as refusal:
        return _refused(request, refusal, approval_id)
    here = f"{request.path}?{urlencode({'t': raw})}"
    user = request.user
    if request.method == "POST":
        if not user.is_authenticated:
            return redirect_to_login(here)
        decision = request.POST.get("decision", "")
        comment = request.POST.get("comment", "").strip()
        if decision == "reject" and not comment:
            messages.error(request, "A rejection needs a reason: it goes back to the model.")
            return redirect(here)
        try:
            do_decide_by_link(link, user, decision, comment)
        except LinkRefused as refusal:
            return _refused(request, refusal, approval_id)
        except runs.ActionError as exc:
            return _refused(
                request, LinkRefused(exc.status, "Nothing was decided", exc.message), approval_id
            )
        approval = Approval.objects.select_related("decided_by").get(pk=approval_id)
        return render(
            request,
            "notify/link_done.html",
            {"approval": approval, "decision": decision},
        )
    approval = link.approval
    needed, given = notify.quorum(approval)
    context = {
        "card": approval_card(approval, needed=needed, given=given),
        "approval": approval,
        "addressee": link.user.get_username(),
        "signed_in_as": user.get_username() if user.is_authenticated else None,
        "token": raw,
        "csrf": get_token(request),
    }
    return render(request, "notify/link_page.html", context)


def _plain_page(request: HttpRequest, approval_id: int) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    approval = (
        Approval.objects.select_related("run__agent", "run__created_by", "decided_by")
        .filter(pk=approval_id, run__in=Run.objects.visible_to(request.user))
        .first()
    )
    if approval is None:
        raise Http404("no such approval")
    allowed, why = runs.may_decide(request.user, approval)
    needed, given = notify.quorum(approval)
    return render(
        request,
        "notify/approval_page.html",
        {
            "card": approval_card(approval, needed=needed, given=given),
            "approval": approval,
            "may_decide": allowed and approval.status == Approval.Status.PENDING,
            "why": why,
            "csrf": get_token(request),
            "next": request.path,
            "notifications": notify.notifications(approval.pk),
        },
    )


@csrf_exempt
@require_POST
def slack_interactions(request: HttpRequest) -> HttpResponse:
    """Slack's interaction callback. 401 for a bad signature; 200 otherwise (Slack wants
    an answer within 3 s; what happened goes back through the response_url)."""
    secret = settings.AGENTWEB_SLACK_SIGNING_SECRET
    if not secret:
        return JsonResponse(
            {"error": {"code": "not_configured", "message": "Slack is not set up here"}},
            status=404,
        )
    try:
        verify_slack(
            secret,
            request.body,
            request.headers.get(SLACK_TIMESTAMP),
            request.headers.get(SLACK_SIGNATURE),
        )
    except BadSignature as exc:
        return JsonResponse({"error": {"code": "bad_signature", "message": str(exc)}}, status=401)
    try:
        payload = json.loads(request.POST.get("payload", ""))
        if not isinstance(payload, dict):
            raise ValueError("not an object")
    except ValueError:
        return JsonResponse(
            {"error": {"code": "invalid", "message": "the payload field must be JSON"}},
            status=400,
        )
    try:
        outcome = slack.handle_interaction(payload)
    except slack.Ignored as exc:
        return JsonResponse({"ignored": str(exc)})
    log.info("slack interaction: %s", outcome)
    return JsonResponse({"ok": True})
