"""The pages. Views parse input, call one action, and render; the rules live in actions."""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
)
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.middleware import HtmxDetails

from agentweb.accounts.roles import start_page
from agentweb.runs import actions, toolset
from agentweb.runs import export as run_export
from agentweb.runs.follow_up import follow_up_filter, used_tool
from agentweb.runs.models import AgentProfile, Run, RunEvent, RunImage
from agentweb.web import fragments, outcome, profile_versions, run_tree, timeline
from agentweb.web.forms import (
    AgentProfileForm,
    ImportForm,
    RunSearchForm,
    TaskForm,
    profile_initial,
    start_mode,
)


class Request(HttpRequest):
    """What the middleware adds, for the type checker (every view here needs a login)."""

    user: User
    htmx: HtmxDetails


RUNS_PER_PAGE = 25
_ID = re.compile(r"[0-9]{1,18}")


def _run_or_404(request: Request, run_id: int) -> Run:
    run = Run.objects.visible_to(request.user).select_related("ticket").filter(pk=run_id).first()
    if run is None:
        raise Http404("no such run")
    return run


def safe_next_url(request: Request, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


@login_required
def home(request: Request) -> HttpResponse:
    return redirect(start_page(request.user))


# --- tickets and starting runs -----------------------------------------------------------


@login_required
@require_POST
def run_new(request: Request) -> HttpResponse:
    form = TaskForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for err in errors:
                messages.error(request, str(err))
        return redirect("web:tickets")
    try:
        run = actions.do_create_run(
            user=request.user,
            task=form.cleaned_data["task"],
            agent_name=form.cleaned_data.get("agent") or None,
            mode=start_mode(request),
        )
    except actions.ActionError as exc:
        messages.error(request, exc.message)
        return redirect("web:tickets")
    return redirect("web:run", run_id=run.pk)


# --- the run page ------------------------------------------------------------------------


@login_required
@require_GET
def run_detail(request: Request, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    steps = timeline.steps_for(events, model=run.model)
    slots = fragments.approval_slots(run, request.user)
    header = fragments.header_context(run, request.user, steps)
    return render(
        request,
        "web/run_detail.html",
        {
            **header,
            "steps": steps,
            "slots": slots,
            "last_seq": steps[-1].seq if steps else 0,
            "csrf": get_token(request),
            "next": request.path,
            "files": _workspace_files(run),
            **run_tree.tree_context(run),
        },
    )


@login_required
@require_GET
def model_call_sent(request: Request, run_id: int, seq: int) -> HttpResponse:
    """The messages and tool specs one model call was sent: a fragment for the run
    page's folded section (htmx), a page of its own otherwise."""
    run = _run_or_404(request, run_id)
    sent = timeline.sent_for(run, seq)
    if sent is None:
        raise Http404("no stored messages for that model call")
    context = {"run": run, "sent": sent, "seq": seq}
    htmx: HtmxDetails = request.htmx
    template = "web/_sent.html" if htmx else "web/model_call_sent.html"
    return render(request, template, context)


# --- images and workspace files of a run -------------------------------------------------


def _workspace_files(run: Run) -> list[Any]:
    """The files in the run's workspace (tools.workbench), if it has one."""
    # Imported here: a tool module, loaded only where AGENTWEB_TOOLS names it (importing
    # it registers its tools and housekeeping); the page needs only its file helpers.
    from tools.workbench import workspace

    path = workspace.workspace_path(str(run.pk), create=False)
    if not path.is_dir():
        return []
    return [e for e in workspace.entries(path) if e.kind == "file"]


_UNTRUSTED = {  # bytes a tool or a model produced: never rendered as a page of ours
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, max-age=3600",
}


@login_required
@require_GET
def run_image(request: Request, run_id: int, ref: str) -> HttpResponse:
    run = _run_or_404(request, run_id)
    image = RunImage.objects.filter(run=run, sha256=ref).first()
    if image is None:
        raise Http404("no such image")
    response = HttpResponse(bytes(image.data), content_type=image.media_type)
    for key, value in _UNTRUSTED.items():
        response[key] = value
    return response


@login_required
@require_GET
def run_file(request: Request, run_id: int, path: str) -> FileResponse:
    """A workspace file as a download (never shown inline: it may be any HTML)."""
    from tools.workbench import workspace  # a tool module: see _workspace_files

    run = _run_or_404(request, run_id)
    root = workspace.workspace_path(str(run.pk), create=False)
    if not root.is_dir():
        raise Http404("this run has no workspace")
    try:
        full, fd = workspace.open_for_read(root, path)
    except workspace.PathRefused as exc:
        raise Http404(str(exc)) from None
    response = FileResponse(
        open(fd, "rb"),  # noqa: SIM115 - FileResponse closes it
        as_attachment=True,
        filename=full.name,
        content_type="application/octet-stream",
    )
    for key, value in _UNTRUSTED.items():
        response[key] = value
    return response


@login_required
@require_POST
def run_cancel(request: Request, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    if not fragments.can_cancel(request.user, run):
        messages.error(request, "You may not cancel this run.")
    else:
        try:
            actions.do_request_cancel(run, request.user)
            messages.info(request, "Cancellation requested.")
        except actions.ActionError as exc:
            messages.error(request, exc.message)
    return redirect("web:run", run_id=run.pk)


# --- runs list ----------------------------------------------------------------------------


def _search(request: Request, form: RunSearchForm) -> Any:
    qs = Run.objects.visible_to(request.user).select_related("agent", "created_by", "ticket")
    if not form.is_valid():
        return qs
    data = form.cleaned_data
    if data.get("q"):
        qs = qs.filter(Q(task__icontains=data["q"]) | Q(final_answer__icontains=data["q"]))
    if data.get("status"):
        qs = qs.filter(status=data["status"])
    if data.get("agent"):
        qs = qs.filter(agent__name=data["agent"])
    if data.get("requester"):
        qs = qs.filter(created_by__username__iexact=data["requester"])
    if data.get("outcome") == "needs_follow_up":
        qs = qs.filter(follow_up_filter())
    if data.get("tool"):
        qs = qs.filter(used_tool(data["tool"]))
    tz = timezone.get_current_timezone()
    if data.get("since"):
        qs = qs.filter(created_at__gte=datetime.combine(data["since"], time.min, tzinfo=tz))
    if data.get("until"):
        end = datetime.combine(data["until"], time.min, tzinfo=tz) + timedelta(days=1)
        qs = qs.filter(created_at__lt=end)
    return qs


@login_required
@require_GET
def runs(request: Request) -> HttpResponse:
    form = RunSearchForm(request.GET or None)
    qs = (
        _search(request, form)
        .defer("final_answer", "state")  # a list shows summaries, never whole answers
        .order_by("-created_at", "-id")
        .annotate(n_tools=Count("events", filter=Q(events__type="tool_call_started")))
    )
    page = Paginator(qs, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "form": form,
        "page": page,
        "runs": page.object_list,
        "outcomes": outcome.for_runs(page.object_list),
        "tool_names": [t["name"] for t in _registered_tools()],
    }
    if request.htmx and request.htmx.target == "runs-table":
        return render(request, "web/_runs_table.html", context)
    return render(request, "web/runs.html", context)


# --- replay, compare, export, import ---------------------------------------------------------


def _replay_context(
    task: str, events: list[RunEvent], model: str
) -> tuple[list[timeline.Step], list[timeline.ContextMessage]]:
    steps = timeline.steps_for(events, model=model)
    messages_ = timeline.replay_context(task, steps)
    return steps, messages_


@login_required
@require_GET
def replay(request: Request, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    steps, context_messages = _replay_context(run.task, events, run.model)
    return render(
        request,
        "web/replay.html",
        {
            "run": run,
            "steps": steps,
            "context_messages": context_messages,
            "ctx_counts": [s.ctx for s in steps],
            "timing": timeline.timing_for(steps),
            "imported": False,
            **run_tree.tree_context(run),
            "tree_replay": True,
        },
    )


def fork_point_of(left: Run, right: Run) -> int | None:
    """The seq one run was forked from the other at (None: neither is the other's fork)."""
    if right.forked_from_id == left.pk:
        return right.forked_at_seq or 0
    if left.forked_from_id == right.pk:
        return left.forked_at_seq or 0
    return None


@login_required
@require_GET
def compare(request: Request) -> HttpResponse:
    a_id, b_id = request.GET.get("a", ""), request.GET.get("b", "")
    context: dict[str, Any] = {"a_id": a_id, "b_id": b_id, "recent": []}
    missing = [
        f"Run #{raw} does not exist or is not visible to you."
        for raw in (a_id, b_id)
        if _ID.fullmatch(raw)
        and not Run.objects.visible_to(request.user).filter(pk=int(raw)).exists()
    ]
    if missing:
        context["errors"] = missing
        context["recent"] = Run.objects.visible_to(request.user).order_by("-created_at")[:30]
        return render(request, "web/compare.html", context, status=404)
    if _ID.fullmatch(a_id) and _ID.fullmatch(b_id):  # not str.isdigit: "²".isdigit()
        left = _run_or_404(request, int(a_id))
        right = _run_or_404(request, int(b_id))
        # A fork beside its source: both from the fork point on (the events before it are
        # the same, copied).
        fork_at = fork_point_of(left, right)
        after = {"seq__gt": fork_at} if fork_at else {}
        left_events = RunEvent.objects.filter(run=left, **after)
        right_events = RunEvent.objects.filter(run=right, **after)
        left_steps = timeline.steps_for(left_events, model=left.model)
        right_steps = timeline.steps_for(right_events, model=right.model)
        left_seq = timeline.calls_of(left_steps, turns=True)
        right_seq = timeline.calls_of(right_steps, turns=True)
        rows = timeline.align(left_seq, right_seq)
        left_timing = timeline.timing_for(left_steps)
        right_timing = timeline.timing_for(right_steps)
        calls = [r for r in rows if not r.is_turn]
        context.update(
            left=left,
            right=right,
            rows=rows,
            calls=calls,
            turn_rows=len(rows) - len(calls),
            left_timing=left_timing,
            right_timing=right_timing,
            left_totals=timeline.totals_of(left_seq, left_timing),
            right_totals=timeline.totals_of(right_seq, right_timing),
            differences=sum(
                1 for r in calls if r.tool_differs or r.args_differ or r.result_differs
            ),
            answers_differ=left.final_answer.strip() != right.final_answer.strip(),
            child_pairs=run_tree.child_pairs(left, right),
            fork_at=fork_at,
        )
    else:
        context["recent"] = Run.objects.visible_to(request.user).order_by("-created_at")[:30]
    return render(request, "web/compare.html", context)


@login_required
@require_GET
def export(request: Request, run_id: int) -> HttpResponse:
    run = _run_or_404(request, run_id)
    response = JsonResponse(run_export.export_document(run), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.json"'
    return response


@login_required
def import_run(request: Request) -> HttpResponse:
    form = ImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            run_data, events = run_export.read_export(upload)
        except ValueError as exc:
            form.add_error("file", str(exc))
        else:
            task = str(run_data.get("task", ""))
            steps, context_messages = _replay_context(
                task,
                events,  # type: ignore[arg-type]
                str(run_data.get("model", "")),
            )
            return render(
                request,
                "web/replay.html",
                {
                    "run": run_data,
                    "steps": steps,
                    "context_messages": context_messages,
                    "ctx_counts": [s.ctx for s in steps],
                    "timing": timeline.timing_for(steps),
                    "imported": True,
                    "filename": upload.name,
                },
            )
    elif request.method not in ("GET", "POST"):
        return HttpResponseBadRequest("GET or POST")
    return render(
        request,
        "web/import.html",
        {"form": form, "schema": run_export.EXPORT_SCHEMA},
        status=422 if form.is_bound else 200,
    )


# --- agents (admins) ---------------------------------------------------------------------------


@login_required
@permission_required("runs.change_agentprofile", raise_exception=True)
def agents(request: Request) -> HttpResponse:
    profiles = AgentProfile.objects.annotate(n_runs=Count("runs")).order_by("name")
    return render(request, "web/agents.html", {"profiles": profiles})


@login_required
@permission_required("runs.add_agentprofile", raise_exception=True)
def agent_new(request: Request) -> HttpResponse:
    """A new profile, or a copy of ``?clone=<name>`` under a new name."""
    source = None
    initial: dict[str, Any] = {}
    clone = request.GET.get("clone") or request.POST.get("clone")
    if clone:
        source = get_object_or_404(AgentProfile, name=clone)
        initial = profile_initial(source)
        initial["name"] = _free_name(f"{source.name}-copy")
    form = AgentProfileForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        assert form.profile is not None
        profile = actions.do_save_profile(
            form.profile,
            actor=request.user,
            fields=form.changed_data,
            cloned_from=source.name if source else None,
        )
        messages.success(request, f"Created {profile.name}.")
        return redirect("web:agent_edit", profile.pk)
    return render(
        request,
        "web/agent_edit.html",
        {"form": form, "profile": None, "clone": source, "tools": _registered_tools()},
        status=422 if form.is_bound else 200,
    )


def _free_name(base: str) -> str:
    name, n = base[:60], 2
    while AgentProfile.objects.filter(name=name).exists():
        name, n = f"{base[:56]}-{n}", n + 1
    return name


@login_required
@permission_required("runs.change_agentprofile", raise_exception=True)
def agent_edit(request: Request, agent_id: int) -> HttpResponse:
    profile = get_object_or_404(AgentProfile, pk=agent_id)
    form = AgentProfileForm(request.POST or None, profile=profile)
    if request.method == "POST" and form.is_valid():
        assert form.profile is not None
        actions.do_save_profile(form.profile, actor=request.user, fields=form.changed_data)
        messages.success(request, f"Saved {profile.name}.")
        return redirect("web:agents")
    if form.is_bound:  # the form reads into the instance: show the stored profile
        profile.refresh_from_db()
    history = profile_versions.history_context(profile, request.GET)
    return render(
        request,
        "web/agent_edit.html",
        {"form": form, "profile": profile, "tools": _registered_tools(), **history},
        status=422 if form.is_bound else 200,
    )


@login_required
@require_POST
@permission_required("runs.change_agentprofile", raise_exception=True)
def agent_delete(request: Request, agent_id: int) -> HttpResponse:
    profile = get_object_or_404(AgentProfile, pk=agent_id)
    try:
        actions.do_delete_profile(profile, actor=request.user)
    except actions.ProfileInUse as exc:
        messages.error(request, f"Not deleted: {exc}.")
        return redirect("web:agent_edit", profile.pk)
    messages.success(request, f"Deleted {profile.name}.")
    return redirect("web:agents")


def _registered_tools() -> list[dict[str, str]]:
    try:
        tools = [
            {"name": t.name, "risk": str(getattr(t, "risk", ""))}
            for t in sorted(toolset.registry(), key=lambda t: t.name)
        ]
    except Exception:  # a broken tool module must not take the admin page down
        return []
    # Every tool of one MCP server, as a profile may allow them: "<server>__*".
    return tools + [{"name": name, "risk": "all"} for name in sorted(toolset.tool_wildcards())]
