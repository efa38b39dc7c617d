"""The JSON API (described by ``openapi.py``). Errors are always ``{"error": {"code", "message"}}``.

Auth: ``Authorization: Bearer <token>`` or the browser session (with CSRF).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import wraps
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Count, Q
from django.db.models.functions import Left
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from agentweb.accounts.models import ApiToken, hash_token
from agentweb.middleware import MAX_INT, BadInput, request_json
from agentweb.outbox.actions import notifications_about
from agentweb.runs import actions, follow_up, profiles
from agentweb.runs.api_input import DecideApproval, StartRun
from agentweb.runs.api_query import ListApprovals, ListEvents, ListRuns
from agentweb.runs.delegation import children_ids
from agentweb.runs.models import SUMMARY_CHARS, AgentProfile, Approval, Run, RunEvent
from agentweb.runs.outcomes import actions_by_run

View = Callable[..., HttpResponse]
NOTIFICATIONS_ABOUT = "approval"  # deliveries of an approval's notifications (agentweb.notify)
MAX_EVENTS = 1000


def error(
    status: int, code: str, message: str, details: Any = None, extra: Any = None
) -> JsonResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return JsonResponse({"error": body, **(extra or {})}, status=status)


#: How stale a token's ``last_used_at`` may be (the token page says "n minutes ago").
TOKEN_USE_PRECISION = timedelta(minutes=1)


def _token_user(request: HttpRequest) -> User | None:
    header = request.headers.get("Authorization", "")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return None
    token = ApiToken.objects.select_related("user").filter(token_hash=hash_token(raw.strip()))
    found = token.first()
    if found is None or not found.user.is_active:
        return None
    now = timezone.now()
    # "last used" is shown to the minute: one UPDATE a minute per token, not per request
    if found.last_used_at is None or now - found.last_used_at >= TOKEN_USE_PRECISION:
        ApiToken.objects.filter(pk=found.pk).update(last_used_at=now)
    return found.user


def api_view(methods: tuple[str, ...]) -> Callable[[View], View]:
    """Authenticate (bearer or session+CSRF), check the method, map action errors."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                refused = error(405, "method_not_allowed", f"use {' or '.join(methods)}")
                refused["Allow"] = ", ".join(methods)  # RFC 9110 §15.5.6
                return refused
            if "Authorization" in request.headers:
                user = _token_user(request)
                if user is None:
                    return error(401, "unauthenticated", "invalid or unknown bearer token")
                request.user = user
            elif request.user.is_authenticated:
                if request.method not in ("GET", "HEAD", "OPTIONS"):
                    reason = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(
                        request, lambda r: HttpResponse(), (), {}
                    )
                    if reason is not None:
                        return error(403, "csrf_failed", "CSRF check failed for this session")
            else:
                return error(401, "unauthenticated", "log in or send a bearer token")
            if not request.user.has_perm("runs.view_run"):  # no role, no data
                return error(
                    403,
                    "no_role",
                    "Your account has no role yet (operator, approver or admin): "
                    "ask an administrator to give you one.",
                )
            try:
                return view(request, *args, **kwargs)
            except actions.ActionError as exc:
                return error(exc.status, exc.code, exc.message, exc.details, exc.extra)

        return wrapper

    return decorate


def _user(request: HttpRequest) -> User:
    """The authenticated user (``api_view`` has refused anonymous requests)."""
    assert isinstance(request.user, User)
    return request.user


def read_body(request: HttpRequest) -> dict[str, Any]:
    """The request's JSON object (``{}`` for no body); any app's API reads bodies with it."""
    if not request.body:
        return {}
    try:
        data = request_json(request)  # strict: no NaN, NUL, surrogates or deep nesting
    except BadInput as exc:
        raise actions.ActionError(f"request body: {exc}") from None
    if not isinstance(data, dict):
        raise actions.ActionError("request body must be a JSON object")
    return data


_body = read_body


def _get_run(user: Any, run_id: int) -> Run:
    run = Run.objects.visible_to(user).filter(pk=run_id).first()
    if run is None:
        raise actions.NotFound(f"no run {run_id}")
    return run


def _int_param(request: HttpRequest, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise actions.ActionError(f"{name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise actions.ActionError(f"{name} must not be negative")
    return min(value, MAX_INT)


@api_view(("GET", "POST"))
def runs(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        start = StartRun.parse(_body(request))
        run = actions.do_create_run(
            user=_user(request),
            task=start.task,
            agent_name=start.agent,
            ticket_id=start.ticket,
            mode=start.mode,
        )
        # The run as created, its profile and starter already on it; created in this
        # request: no child, approval or tool call of it to look up yet.
        return JsonResponse(run.as_json([], []), status=201)
    query = ListRuns.parse(request.GET)
    qs = Run.objects.visible_to(request.user)
    if query.status:
        qs = qs.filter(status=query.status)
    q = query.q.strip()
    if q:
        qs = qs.filter(Q(task__icontains=q) | Q(final_answer__icontains=q))
    if query.outcome:
        qs = qs.filter(follow_up.follow_up_filter())
    limit = query.limit
    qs = qs.defer("final_answer", "state").annotate(
        answer_head=Left("final_answer", SUMMARY_CHARS + 1)
    )
    page = list(qs[:limit])
    fates, children = actions_by_run(page), children_ids(page)
    return JsonResponse(
        {"runs": [r.as_json(fates[r.pk], children[r.pk], summary=True) for r in page]}
    )


@api_view(("GET",))
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    return JsonResponse(_get_run(request.user, run_id).as_json())


@api_view(("GET",))
def run_events(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _get_run(request.user, run_id)
    after = ListEvents.parse(request.GET).after
    events = RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:MAX_EVENTS]
    return JsonResponse({"events": [e.as_json() for e in events]})


@api_view(("POST",))
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = actions.do_request_cancel(_get_run(request.user, run_id), _user(request))
    return JsonResponse(Run.objects.select_related("agent", "created_by").get(pk=run.pk).as_json())


@api_view(("GET",))
def approvals(request: HttpRequest) -> HttpResponse:
    query = ListApprovals.parse(request.GET)
    qs = Approval.objects.visible_to(request.user).select_related("decided_by", "run")
    if query.status:
        qs = qs.filter(status=query.status)
    limit = query.limit
    page = list(qs.annotate(approvals_given_n=Count("votes")).order_by("requested_at")[:limit])
    return JsonResponse({"approvals": approvals_json(page)})


def approvals_json(approvals: Sequence[Approval]) -> list[dict[str, Any]]:
    """Approvals as the API shows them, each with its notifications (what reached whom)."""
    told = notifications_about(NOTIFICATIONS_ABOUT, [a.pk for a in approvals])
    return [{**a.as_json(), "notifications": told.get(a.pk, [])} for a in approvals]


@api_view(("POST",))
def approval_decide(request: HttpRequest, approval_id: int) -> HttpResponse:
    decide = DecideApproval.parse(_body(request))
    approval = actions.do_decide_approval(
        approval_id=approval_id,
        user=_user(request),
        decision=decide.decision,
        comment=decide.comment,
        arguments=decide.arguments,
    )
    return JsonResponse(approvals_json([approval])[0])


# --- agent profiles -----------------------------------------------------------------


def _profile_invalid(exc: Any) -> JsonResponse:
    fields = ", ".join(sorted(exc.errors))
    return error(422, "invalid_profile", f"invalid fields: {fields}: {exc}", exc.errors)


def _profile(name: str) -> Any:
    profile = AgentProfile.objects.filter(name=name).first()
    if profile is None:
        raise actions.NotFound(f"no agent profile {name!r}")
    return profile


@api_view(("GET", "POST"))
def agent_profiles(request: HttpRequest) -> HttpResponse:
    """GET: every profile (anyone signed in); POST: create one (admins)."""
    if request.method == "GET":
        found = AgentProfile.objects.order_by("name")
        return JsonResponse({"agents": [profiles.profile_json(p) for p in found]})
    actions.check_change_profiles(_user(request), creating=True)  # before anything is read
    data = _body(request)
    name = data.get("name")
    if isinstance(name, str) and AgentProfile.objects.filter(name=name.strip()).exists():
        raise actions.Conflict(f"an agent profile named {name.strip()!r} exists; PUT to change it")
    try:
        created = profiles.save_profile(data, actor=request.user)
    except profiles.ProfileInvalid as exc:
        return _profile_invalid(exc)
    return JsonResponse(profiles.profile_json(created), status=201)


@api_view(("GET", "PUT", "PATCH", "DELETE"))
def agent_profile(request: HttpRequest, name: str) -> HttpResponse:
    """One profile: GET (anyone signed in); PUT replaces, PATCH changes the given
    fields, DELETE removes one no run uses (admins)."""
    profile = _profile(name)
    if request.method == "GET":
        return JsonResponse(profiles.profile_json(profile))
    actions.check_change_profiles(_user(request))  # before anything is read
    if request.method == "DELETE":
        actions.do_delete_profile(profile, actor=_user(request))
        return HttpResponse(status=204)
    data = _body(request)
    if data.get("name", profile.name) != profile.name:
        message = "a profile keeps its name (runs refer to it); create a copy instead"
        return error(422, "invalid_profile", f"invalid fields: name: {message}", {"name": message})
    data["name"] = profile.name
    try:
        saved = profiles.save_profile(
            data, profile, actor=request.user, partial=request.method == "PATCH"
        )
    except profiles.ProfileInvalid as exc:
        stored = set(exc.errors) - {"__all__"}  # __all__: unknown fields, the body's own
        if request.method == "PATCH" and stored == set(exc.errors) and not stored & set(data):
            # The body is fine; what it changes does not fit the fields it left alone
            # (a "never" policy stored, risk_overrides now "high"): the profile's state.
            fields = ", ".join(sorted(exc.errors))
            return error(
                409, "conflict", f"the change conflicts with the stored {fields}: {exc}", exc.errors
            )
        return _profile_invalid(exc)
    return JsonResponse(profiles.profile_json(saved))
