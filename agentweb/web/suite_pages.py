"""/suites/ and /experiments/compare/ (DESIGN §14): suites with their experiments, and two
experiments side by side case by case."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from agentweb.runs import suites
from agentweb.runs.errors import ActionError, NotFound
from agentweb.runs.models import Experiment, Run, Suite


@login_required
@require_GET
@permission_required("runs.add_suite", raise_exception=True)
def suite_list(request: HttpRequest) -> HttpResponse:
    found = list(Suite.objects.order_by("name").prefetch_related("experiments__agent"))
    rows = [
        {
            "suite": s,
            "experiments": [
                suites.experiment_json(e) for e in s.experiments.order_by("-created_at")[:10]
            ],
        }
        for s in found
    ]
    return render(request, "web/suites.html", {"rows": rows, "nav_section": "suites"})


def _experiment(raw: str) -> dict[str, Any] | None:
    text = (raw or "").strip()
    if not (text.isascii() and text.isdecimal() and len(text) < 18):
        return None
    try:
        return suites.experiment_json(suites.get_experiment(int(text)))
    except NotFound:
        return None


def _change(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    if a is None or b is None:
        return "only in " + ("B" if a is None else "A")
    if a["passed"] and b["passed"] is False:
        return "passed → failed"
    if a["passed"] is False and b["passed"]:
        return "failed → passed"
    if a["calls"] != b["calls"]:
        return "calls changed"
    return ""


@login_required
@require_GET
@permission_required("runs.add_suite", raise_exception=True)
def experiment_compare(request: HttpRequest) -> HttpResponse:
    a, b = _experiment(request.GET.get("a", "")), _experiment(request.GET.get("b", ""))
    rows = []
    if a and b:
        left = {c["name"]: c for c in a["cases"]}
        right = {c["name"]: c for c in b["cases"]}
        for name in [*left, *(n for n in right if n not in left)]:
            ca, cb = left.get(name), right.get(name)
            rows.append({"name": name, "sides": [ca, cb], "change": _change(ca, cb)})
    context = {
        "a": a,
        "b": b,
        "rows": rows,
        "a_id": request.GET.get("a", ""),
        "b_id": request.GET.get("b", ""),
        "recent": Experiment.objects.select_related("suite", "agent")[:20],
        "nav_section": "suites",
    }
    status = 404 if (request.GET.get("a") or request.GET.get("b")) and not (a and b) else 200
    return render(request, "web/experiment_compare.html", context, status=status)


@login_required
@permission_required("runs.add_suite", raise_exception=True)
def suite_add(request: HttpRequest) -> HttpResponse:
    """ "Add to suite" from a run's page: a case made from the run, its calls as the
    expectation, edited before saving (the JSON is read as the API reads a case)."""
    raw = (request.POST.get("run") or request.GET.get("run") or "").strip()
    run = None
    if raw.isascii() and raw.isdecimal() and len(raw) < 18:
        run = Run.objects.visible_to(request.user).filter(pk=int(raw)).first()
    if run is None:
        raise Http404("no such run")
    error = ""
    suite_name = request.POST.get("suite", "").strip()
    case_name = request.POST.get("name", f"run {run.pk}: {run.task[:80]}").strip()
    expect_text = request.POST.get("expect") or json.dumps(
        suites.expect_from_run(run), indent=2, ensure_ascii=False
    )
    if request.method == "POST":
        try:
            expect = json.loads(expect_text)
        except ValueError as exc:
            error = f"expect: not JSON ({exc})"
        else:
            case = {"name": case_name, "run": run.pk, "expect": expect}
            try:
                suite = suites.do_add_case(request.user, suite_name, case)
            except ActionError as exc:
                error = exc.message
            else:
                messages.success(request, f"Added {case_name!r} to {suite.name}.")
                return redirect("web:suites")
    context = {
        "run": run,
        "suite_name": suite_name,
        "case_name": case_name,
        "expect_text": expect_text,
        "error": error,
        "existing": list(Suite.objects.order_by("name").values_list("name", flat=True)),
        "nav_section": "suites",
    }
    return render(request, "web/suite_add.html", context, status=422 if error else 200)
