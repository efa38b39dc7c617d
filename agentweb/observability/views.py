"""``/metrics``: Prometheus text for every process, behind ``AGENTWEB_METRICS_TOKEN``."""

from __future__ import annotations

import hmac
import logging
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from agentweb.observability import metrics
from agentweb.runs.models import Approval, Run

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.AGENTWEB_METRICS_TOKEN
    if not token:
        return HttpResponse(
            "metrics are off: set AGENTWEB_METRICS_TOKEN\n", status=404, content_type="text/plain"
        )
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
        response = HttpResponse("bearer token required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    try:
        body = metrics.exposition(database_gauges())
    except Exception as exc:
        log.warning("metrics scrape failed", exc_info=True)
        return HttpResponse(
            f"metrics unavailable: {type(exc).__name__}\n", status=503, content_type="text/plain"
        )
    return HttpResponse(body, content_type=CONTENT_TYPE)


def database_gauges() -> dict[str, Any]:
    """Two small indexed counts (status is the leading column of both indexes)."""
    pending = Approval.objects.filter(status=Approval.Status.PENDING).count()
    rows = (
        Run.objects.filter(status__in=Run.ACTIVE)
        .order_by()
        .values_list("status")
        .annotate(n=Count("id"))
    )
    active = {str(status): 0 for status in Run.ACTIVE}
    active.update({str(status): int(n) for status, n in rows})
    return {"approvals_pending": pending, "runs_active": active}
