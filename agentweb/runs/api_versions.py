"""The JSON API of profile versions (DESIGN §14; read-only: every save of a profile makes
one, ``versions.record``) and of forks of runs."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentweb.runs import forks, versions
from agentweb.runs.api import _body, _get_run, _profile, _user, api_view
from agentweb.runs.models import Run
from agentweb.runs.strict_input import ForkRun


@api_view(("GET",))
def agent_versions(request: HttpRequest, name: str) -> HttpResponse:
    """Every version of a profile, newest first."""
    found = versions.listing(_profile(name))
    return JsonResponse({"versions": [v.as_json() for v in found]})


@api_view(("GET",))
def agent_version(request: HttpRequest, name: str, n: int) -> HttpResponse:
    """One version; PUT, PATCH and DELETE are 405 (versions never change)."""
    return JsonResponse(versions.get(_profile(name), n).as_json())


@api_view(("POST",))
def run_fork(request: HttpRequest, run_id: int) -> HttpResponse:
    """A dry run continuing a run this user sees from one of its events (201)."""
    source = _get_run(request.user, run_id)  # another team's run: 404, nothing created
    body = ForkRun.parse(_body(request))
    fork = forks.do_fork(
        source,
        user=_user(request),
        at_seq=body.at_seq,
        agent_name=body.agent,
        version=body.version,
        model=body.model,
    )
    fork = Run.objects.select_related("agent", "created_by").get(pk=fork.pk)
    return JsonResponse(fork.as_json(), status=201)
