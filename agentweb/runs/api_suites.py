"""The JSON API of suites and experiments (DESIGN §14; ``suites`` holds the rules)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentweb.runs import suites
from agentweb.runs.api import _body, _user, api_view
from agentweb.runs.models import Suite


@api_view(("GET", "POST"))
def suite_list(request: HttpRequest) -> HttpResponse:
    """GET: every suite; POST: create one (422 naming a wrong key or case)."""
    suites.check_may(_user(request))
    if request.method == "GET":
        found = Suite.objects.select_related("created_by").order_by("name")
        return JsonResponse({"suites": [suites.suite_json(s) for s in found]})
    body = suites.CreateSuite.parse(_body(request))
    suite = suites.do_create_suite(_user(request), body)
    return JsonResponse(suites.suite_json(suite), status=201)


@api_view(("POST",))
def suite_experiments(request: HttpRequest, name: str) -> HttpResponse:
    """Start an experiment: every case as a dry run of the given profile version."""
    suites.check_may(_user(request))
    suite = suites.get_suite(name)
    body = suites.StartExperiment.parse(_body(request))
    experiment = suites.do_start_experiment(_user(request), suite, body)
    return JsonResponse(suites.experiment_json(experiment), status=201)


@api_view(("GET",))
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    suites.check_may(_user(request))
    return JsonResponse(suites.experiment_json(suites.get_experiment(experiment_id)))
