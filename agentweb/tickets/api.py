"""The tickets' JSON API (DESIGN §11), on the runs API's authentication and errors."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentweb.runs import actions
from agentweb.runs.api import api_view
from agentweb.tickets.models import Ticket
from agentweb.tickets.serialize import tickets_json, with_thread


@api_view(("GET",))
def tickets(request: HttpRequest) -> HttpResponse:
    qs = Ticket.objects.all()
    status = request.GET.get("status")
    if status:
        if status not in Ticket.Status.values:
            raise actions.ActionError(
                f"unknown status {status!r}; one of {', '.join(Ticket.Status.values)}"
            )
        qs = qs.filter(status=status)
    return JsonResponse({"tickets": tickets_json(list(with_thread(qs)[:500]))})
