"""The ticket pages (DESIGN §11): ``/tickets/`` lists tickets of every source with search,
filters and pages, ``/tickets/<id>/`` shows one ticket's thread, its runs and a start
button. Both are live: ``/ws/tickets/`` says when a ticket changes, and the page fetches
its list or thread again (server-rendered, every customer text escaped by the templates).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.middleware import HtmxDetails

from agentweb.runs import actions
from agentweb.runs.errors import ActionError, NotFound, TicketBusy
from agentweb.runs.models import AgentProfile, Run
from agentweb.tickets import intake, replies
from agentweb.tickets.api import filtered
from agentweb.tickets.context import domain_context
from agentweb.tickets.models import Message, Ticket
from agentweb.tickets.serialize import with_thread
from agentweb.web import outcome
from agentweb.web.forms import TaskForm, start_mode

TICKETS_PER_PAGE = 20
ANY = "all"  # the status tab that shows every status
REFRESH_HEADER = "X-Agentweb-Refresh"  # live.js, when a ticket changed


class Request(HttpRequest):
    user: User
    htmx: HtmxDetails


def _text(params: Any, name: str, limit: int = 200) -> str:
    value = params.get(name) or ""
    return value.strip()[:limit] if isinstance(value, str) else ""


def startable_profiles(user: Any) -> list[str]:
    """The profiles ``user`` may start a run of (every one, for whoever may start runs)."""
    if not actions.may_start_run(user)[0]:
        return []
    return list(AgentProfile.objects.order_by("name").values_list("name", flat=True))


@login_required
@require_GET
def tickets(request: Request) -> HttpResponse:
    """Tickets of every source: ``status`` (a tab; default open, ``all``), ``queue``,
    ``source`` and ``q`` (words, an email address, ``#id``), 20 a page."""
    status = request.GET.get("status", Ticket.Status.OPEN)
    if status not in Ticket.Status.values:
        status = ANY
    search = {
        "q": _text(request.GET, "q"),
        "queue": _text(request.GET, "queue", 100),
        "source": _text(request.GET, "source", 64),
    }
    visible = Ticket.objects.visible_to(request.user)
    qs = filtered(visible, {**search, "status": "" if status == ANY else status})
    ordered = with_thread(qs).order_by("-updated_at", "-id")
    page = Paginator(ordered, TICKETS_PER_PAGE).get_page(request.GET.get("page"))
    ticket_list = list(page.object_list)
    runs_by_ticket: dict[int, list[Run]] = {}
    for run in (
        Run.objects.visible_to(request.user)
        .filter(ticket__in=ticket_list, parent__isnull=True)
        .order_by("-created_at")
    ):
        if run.ticket_id is not None:
            runs_by_ticket.setdefault(run.ticket_id, []).append(run)
    context = domain_context(ticket_list)
    # The card's button starts what the intake rules suggest for the ticket, if anything.
    profiles = set(startable_profiles(request.user))
    rules = [r for r in intake.rules() if r.agent in profiles]
    rows = [
        {
            "ticket": t,
            "suggested": next((r.agent for r in rules if r.matches(t.queue, list(t.tags))), None),
            "runs": runs_by_ticket.get(t.pk, [])[:3],
            "context": context.get(t.pk, []),
            # one active run per ticket: the card links to it instead of starting another
            # (a dry run is not the ticket's run: DESIGN §14)
            "active": next(
                (r for r in runs_by_ticket.get(t.pk, []) if r.is_active and not r.is_dry), None
            ),
        }
        for t in ticket_list
    ]
    shown = [run for t in ticket_list for run in runs_by_ticket.get(t.pk, [])[:3]]
    by_filters = filtered(visible, search)
    counts = dict(by_filters.values_list("status").annotate(n=Count("pk")).order_by())
    values = {
        name: sorted(v for v in visible.order_by().values_list(name, flat=True).distinct() if v)
        for name in ("queue", "source")
    }
    ctx = {
        "rows": rows,
        "page": page,
        "status": status,
        "statuses": [(ANY, "All"), *Ticket.Status.choices],
        "counts": {**counts, ANY: sum(counts.values())},
        "search": search,
        "filtered": any(search.values()),
        "queues": values["queue"],
        "sources": values["source"],
        "form": TaskForm(),
        "outcomes": outcome.for_runs(shown),
    }
    if request.htmx and request.htmx.target == "ticket-list":
        # A live refresh brings the filters' choices too (a ticket may have brought a new
        # queue or source); the search form's own requests leave its choices alone.
        oob = request.headers.get(REFRESH_HEADER) == "1"
        return render(request, "web/_ticket_list.html", {**ctx, "oob": oob})
    return render(request, "web/tickets.html", ctx)


def _ticket_or_404(request: Request, ticket_id: int) -> Ticket:
    ticket = with_thread(Ticket.objects.visible_to(request.user)).filter(pk=ticket_id).first()
    if ticket is None:  # another team's ticket is no ticket to this person
        raise Http404("no such ticket")
    return ticket


@login_required
@require_GET
def ticket_detail(request: Request, ticket_id: int) -> HttpResponse:
    """One ticket: its facts, the thread (replies with their delivery state), its runs and
    a start button with every profile the user may start."""
    ticket = _ticket_or_404(request, ticket_id)
    thread = ticket.thread()
    found = replies.deliveries_of(thread)
    entries = [
        {
            "message": m,
            "delivery": replies.delivery_json(m, found),
            "attachments": m.as_json()["attachments"],
        }
        for m in thread
    ]
    runs = list(
        Run.objects.visible_to(request.user)
        .filter(ticket=ticket)
        .select_related("agent", "created_by")
        .order_by("-created_at")[:50]
    )
    active = next((r for r in runs if r.is_active and r.parent_id is None and not r.is_dry), None)
    profiles = startable_profiles(request.user)
    suggested = [name for name in intake.suggested_agents(ticket) if name in profiles]
    default = next(iter(suggested), actions.DEFAULT_AGENT)
    ctx = {
        "ticket": ticket,
        "entries": entries,
        "runs": runs,
        "active": active,
        "outcomes": outcome.for_runs(runs),
        "profiles": profiles,
        "suggested": suggested,
        "default_profile": default if default in profiles else next(iter(profiles), ""),
        "context": domain_context([ticket]).get(ticket.pk, []),
        "incoming": sum(1 for m in thread if m.direction == Message.Direction.IN),
    }
    if request.htmx and request.htmx.target == "ticket-live":
        return render(request, "web/_ticket_live.html", ctx)
    return render(request, "web/ticket_detail.html", ctx)


@login_required
@require_POST
def ticket_run(request: Request, ticket_id: int) -> HttpResponse:
    # A suggestion's button names its profile; otherwise the profile picked in the list.
    agent = _text(request.POST, "suggested", 100) or _text(request.POST, "agent", 100) or None
    back = request.POST.get("from") == "ticket"
    try:
        run = actions.do_create_run(
            user=request.user,
            task="",
            agent_name=agent,
            ticket_id=ticket_id,
            mode=start_mode(request),
        )
    except TicketBusy as exc:  # one active run per ticket: go to that one
        messages.info(request, exc.message)
        return redirect("web:run", run_id=exc.extra["active_run"])
    except ActionError as exc:
        messages.error(request, exc.message)
        if back and not isinstance(exc, NotFound):
            return redirect("web:ticket", ticket_id=ticket_id)
        return redirect("web:tickets")
    return redirect("web:run", run_id=run.pk)
