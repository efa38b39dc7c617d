"""Spend per team and per profile, for admins: ``/spend/`` and ``GET /api/spend``."""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Annotated

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from pydantic import AfterValidator, Field, WithJsonSchema

from agentweb.budgets import ledger
from agentweb.budgets.report import report
from agentweb.runs import actions
from agentweb.runs.api import api_view
from agentweb.runs.api_input import Query

#: who may see what every team and profile spends
PERMISSION = "teams.view_all_teams"


def _day(raw: str | None) -> date:
    if not raw:
        return ledger.today()
    if not re.fullmatch("[0-9]{4}-[0-9]{2}-[0-9]{2}", raw):  # RFC 3339 full-date only
        raise actions.ActionError(f"day must be a date, YYYY-MM-DD, got {raw[:40]!r}")
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise actions.ActionError(f"day must be a date, YYYY-MM-DD, got {raw[:40]!r}") from None


class SpendQuery(Query):
    """``GET /api/spend``: the day (the document's ``format: date``; ``_day`` reads it)."""

    day: Annotated[
        date | str,
        AfterValidator(_day),
        WithJsonSchema({"type": "string", "format": "date"}),
        Field(description="YYYY-MM-DD in the installation's TIME_ZONE; default today"),
    ] = ""


@api_view(("GET",))
def api_spend(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(PERMISSION):
        raise actions.NotAllowed("only admins see what every team and profile spends")
    day = SpendQuery.parse(request.GET).day
    return JsonResponse(report(_day(day) if isinstance(day, str) else day).model_dump(mode="json"))


@login_required
@require_GET
def spend_page(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    try:
        day = _day(request.GET.get("day"))
    except actions.ActionError:
        day = ledger.today()
    return render(
        request,
        "budgets/spend.html",
        {
            "report": report(day),
            "today": ledger.today(),
            "before": day - timedelta(days=1),
            "after": day + timedelta(days=1) if day < ledger.today() else None,
        },
    )
