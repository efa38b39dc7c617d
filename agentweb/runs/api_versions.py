"""The JSON API of profile versions (DESIGN §14): read-only; every save of a profile
makes one (``versions.record``)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentweb.runs import versions
from agentweb.runs.api import _profile, api_view


@api_view(("GET",))
def agent_versions(request: HttpRequest, name: str) -> HttpResponse:
    """Every version of a profile, newest first."""
    found = versions.listing(_profile(name))
    return JsonResponse({"versions": [v.as_json() for v in found]})


@api_view(("GET",))
def agent_version(request: HttpRequest, name: str, n: int) -> HttpResponse:
    """One version; PUT, PATCH and DELETE are 405 (versions never change)."""
    return JsonResponse(versions.get(_profile(name), n).as_json())
