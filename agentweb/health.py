"""Liveness for load balancers and the Docker HEALTHCHECK: the database answers."""

from django.db import connection
from django.http import HttpRequest, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"ok": False, "database": str(exc)[:200]}, status=503)
    return JsonResponse({"ok": True})
