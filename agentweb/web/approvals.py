"""The approvals pages: the inbox, and deciding a call (from the inbox or a run page)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agentweb.middleware import BadInput, strict_json
from agentweb.outbox.actions import notifications_about
from agentweb.runs import actions, approval_why
from agentweb.runs.models import Approval
from agentweb.web import approval_form, fragments
from agentweb.web.views import Request, safe_next_url


def _pending_approvals(user: Any) -> list[dict[str, Any]]:
    qs = (
        Approval.objects.visible_to(user)
        .filter(status=Approval.Status.PENDING)
        .select_related("run", "run__created_by", "run__agent")
        .order_by("requested_at")
    )
    pending = list(qs[:500])
    explained = approval_why.explain_many(pending)
    told = notifications_about("approval", [a.pk for a in pending])  # agentweb.notify's
    rows = []
    for approval in pending:
        allowed, why = actions.may_decide(user, approval)
        rows.append(
            {
                "approval": approval,
                "may_decide": allowed,
                "why": why,
                "explained": explained[approval.pk],
                "form_fields": fragments.edit_fields(approval) if allowed else None,
                "notifications": told.get(approval.pk, []),
            }
        )
    return rows


@login_required
@require_GET
def approvals(request: Request) -> HttpResponse:
    context = {
        "rows": _pending_approvals(request.user),
        "csrf": get_token(request),
        "next": request.path,
    }
    recent = (
        Approval.objects.visible_to(request.user)
        .exclude(status=Approval.Status.PENDING)
        .select_related("decided_by", "run")
        .order_by("-decided_at")[:15]
    )
    partial = request.GET.get("partial")
    if partial == "recent":  # the decided list follows decisions live, as the pending one
        return render(request, "web/_approvals_recent.html", {"recent": recent})
    if partial:
        return render(request, "web/_approvals_list.html", context)
    return render(request, "web/approvals.html", {**context, "recent": recent})


@login_required
@require_POST
def approval_decide(request: Request, approval_id: int) -> HttpResponse:
    """Approve, approve with edited arguments (the form's fields, or its JSON box), or
    reject with a reason: one call of the decide action, whose refusals come back beside
    the field they are about."""
    approval = (
        Approval.objects.visible_to(request.user)
        .select_related("run", "run__agent")
        .filter(pk=approval_id)
        .first()
    )
    if approval is None:
        raise Http404("no such approval")
    action = request.POST.get("decision", "")
    if action == "edit" and not any(k.startswith(approval_form.PREFIX) for k in request.POST):
        action = "edit_json"  # a form without the schema's fields: its JSON box
    comment = request.POST.get("comment", "")
    arguments: Any = None
    problems = _Problems()
    if action == "edit":  # the schema's form
        arguments, problems.fields = approval_form.read(approval.tool, request.POST)
        if problems.fields:
            problems.form = "Not approved: fix the fields marked below."
    elif action == "edit_json":
        try:
            arguments = strict_json(request.POST.get("arguments", ""))
        except BadInput as exc:
            problems.json = f"The edited arguments: {exc}."
        else:
            if not isinstance(arguments, dict):
                problems.json = "The edited arguments must be a JSON object."
    if not problems:
        try:
            actions.do_decide_approval(
                approval_id=approval.pk,
                user=request.user,
                decision="approve" if action in ("edit", "edit_json") else action,
                comment=comment,
                arguments=arguments,
            )
        except actions.ActionError as exc:
            problems.refused(exc, action)
    default = reverse("web:run", args=[approval.run_id])
    next_url = safe_next_url(request, default)
    if request.htmx:
        approval.refresh_from_db()
        allowed, why = actions.may_decide(request.user, approval)
        pending = allowed and approval.status == Approval.Status.PENDING
        on_run_page = not next_url.startswith(reverse("web:approvals"))
        fields = None
        if pending:
            posted = request.POST if action == "edit" and problems else None
            fields = fragments.edit_fields(approval, posted=posted, errors=problems.fields)
        return render(
            request,
            "web/_approval_slot.html",
            {
                "approval": approval,
                "may_decide": pending,
                "why": why,
                "error": problems.top,
                "csrf": get_token(request),
                "next": next_url,
                "form_fields": fields,
                "form_error": problems.form,
                "json_error": problems.json,
                "reject_error": problems.reject,
                "explained": (approval_why.explain(approval) if pending and on_run_page else None),
                "posted_arguments": request.POST.get("arguments", "")
                if action == "edit_json"
                else "",
                "reopen_edit": action == "edit" and bool(problems),
                "reopen_json": action == "edit_json" and bool(problems),
            },
        )
    if problems:
        messages.error(request, problems.summary())
    else:
        word = "rejected" if action == "reject" else "approved"
        messages.success(request, f"{approval.tool}: {word}.")
    return HttpResponseRedirect(next_url)


class _Problems:
    """What stopped a decision, by where the page shows it."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}  # beside each argument's field
        self.form = ""  # above the form's button
        self.json = ""  # beside the JSON box
        self.reject = ""  # beside the reason
        self.top = ""  # above it all (already decided, not allowed ...)

    def __bool__(self) -> bool:
        return bool(self.fields or self.form or self.json or self.reject or self.top)

    def refused(self, exc: actions.ActionError, action: str) -> None:
        details = exc.details if isinstance(exc.details, dict) else {}
        fields = details.get("fields") if isinstance(exc, actions.InvalidArguments) else None
        if isinstance(exc, actions.ReasonRequired):
            self.reject = "Say why: the reason goes back to the model."
        elif action == "edit" and isinstance(exc, actions.InvalidArguments):
            self.fields = {k: v for k, v in (fields or {}).items() if k}
            whole = (fields or {}).get("")  # about the arguments as a whole
            if whole:
                self.form = f"Not approved: {whole}"
            elif self.fields:
                self.form = "Not approved: fix the fields marked below."
            else:  # the tool's own check (check=): its reason, in its words
                self.form = f"Not approved: {exc.message}"
        elif action == "edit_json" and isinstance(exc, actions.InvalidArguments):
            self.json = f"Not approved: {exc.message}"
        else:
            self.top = exc.message

    def summary(self) -> str:
        parts = [self.top, self.form, self.json, self.reject]
        parts += [f"{name}: {text}" for name, text in self.fields.items()]
        return " ".join(p for p in parts if p)
