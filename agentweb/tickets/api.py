"""The tickets' JSON API (DESIGN §11), on the runs API's authentication and errors.

A refused body is 422 ``{"error": {"code": "invalid_ticket", "message", "field"}}``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse

from agentweb.runs import actions as run_actions
from agentweb.runs.api import _body, _user, api_view
from agentweb.tickets import actions
from agentweb.tickets.api_input import (
    AddMessage,
    ChangeTicket,
    CreateTicket,
    InvalidTicket,
    ListTickets,
)
from agentweb.tickets.models import Ticket
from agentweb.tickets.serialize import ticket_json, tickets_json, with_thread

View = Callable[..., HttpResponse]


def invalid(exc: InvalidTicket) -> JsonResponse:
    body = {"code": exc.code, "message": exc.message, "field": exc.field}
    return JsonResponse({"error": body}, status=exc.status)


def ticket_view(methods: tuple[str, ...]) -> Callable[[View], View]:
    """``api_view`` (auth, method, errors), with refused bodies naming their field."""

    def decorate(view: View) -> View:
        @wraps(view)
        def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except InvalidTicket as exc:
                return invalid(exc)

        return api_view(methods)(inner)

    return decorate


def filtered(qs: QuerySet[Ticket], params: Any) -> QuerySet[Ticket]:
    """Tickets by ``status``, ``queue``, ``source``, ``tag`` and ``q`` (words in the
    subject, the messages, the requester or the external id)."""
    status = params.get("status")
    if status:
        if status not in Ticket.Status.values:
            raise run_actions.ActionError(
                f"unknown status {status!r}; one of {', '.join(Ticket.Status.values)}"
            )
        qs = qs.filter(status=status)
    for name in ("queue", "source"):
        value = params.get(name)
        if value:
            qs = qs.filter(**{name: value})
    tag = params.get("tag")
    if tag:
        qs = qs.filter(tags__contains=[tag])
    q = (params.get("q") or "").strip()
    if q:
        hits = Q(subject__icontains=q) | Q(requester_email__icontains=q)
        hits |= Q(requester_name__icontains=q) | Q(external_id=q)
        digits = q.lstrip("#")
        if digits.isascii() and digits.isdigit() and len(digits) < 18:
            hits |= Q(pk=int(digits))
        in_messages = Ticket.objects.filter(messages__body__icontains=q).values("pk")
        qs = qs.filter(hits | Q(pk__in=in_messages))
    return qs


@ticket_view(("GET", "POST"))
def tickets(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _create(request)
    query = ListTickets.parse(request.GET)
    qs = filtered(Ticket.objects.visible_to(request.user), query.model_dump())
    page = list(with_thread(qs)[query.offset : query.offset + query.limit])
    return JsonResponse({"tickets": tickets_json(page)})


def _create(request: HttpRequest) -> HttpResponse:
    actions.may_add_tickets(_user(request))
    body = CreateTicket.parse(_body(request))
    if body.external_id:  # the same ticket again: only one this person may see
        same = Ticket.objects.filter(source=body.source, external_id=body.external_id)
        if same.exists() and not same.visible_to(_user(request)).exists():
            raise run_actions.NotAllowed(
                "a ticket with this source and external_id is in another team's queue"
            )
    received = actions.do_receive_ticket(
        actions.Incoming(
            source=body.source,
            external_id=body.external_id,
            subject=body.subject,
            body=body.body,
            requester_email=body.requester.email,
            requester_name=body.requester.name,
            queue=body.queue,
            tags=body.tags,
            fields=body.fields,
        ),
        by=_user(request),
    )
    return JsonResponse(_one(received.ticket.pk), status=201 if received.created else 200)


def _one(ticket_id: int, user: Any = None) -> dict[str, Any]:
    tickets = Ticket.objects.all() if user is None else Ticket.objects.visible_to(user)
    ticket = with_thread(tickets.filter(pk=ticket_id)).first()
    if ticket is None:
        raise run_actions.NotFound(f"no ticket {ticket_id}")
    return ticket_json(ticket, run_actions.active_run_for_ticket(ticket.pk))


@ticket_view(("GET", "PATCH"))
def ticket_detail(request: HttpRequest, ticket_id: int) -> HttpResponse:
    if request.method == "PATCH":
        actions.may_change_tickets(_user(request))
        actions.get_ticket(ticket_id, _user(request))  # 404 before the body is read
        change = ChangeTicket.parse(_body(request))
        actions.do_change_ticket(
            ticket_id,
            by=_user(request),
            status=change.status,
            queue=change.queue,
            tags=change.tags,
            fields=change.fields,
        )
        return JsonResponse(_one(ticket_id))  # also when it moved to another team's queue
    return JsonResponse(_one(ticket_id, _user(request)))


@ticket_view(("POST",))
def ticket_messages(request: HttpRequest, ticket_id: int) -> HttpResponse:
    actions.may_change_tickets(_user(request))
    actions.get_ticket(ticket_id, _user(request))
    add = AddMessage.parse(_body(request))
    message, created = actions.do_add_message(
        ticket_id, add.body, by=_user(request), direction=add.direction, author=add.author
    )
    return JsonResponse({**message.as_json(), "ticket": ticket_id}, status=201 if created else 200)
