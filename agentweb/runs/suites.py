"""Suites and experiments (DESIGN §14): cases from tasks, tickets or past runs with what
is expected of them; an experiment plays every case as a dry run of one profile version
(in parallel, on the workers) and scores each from its run's events.

A case made from a past run (``"run": id``) is a fork of that run after its first event
(``forks``): the version under test answers the same task, and every call equal to one the
run made gets its recorded result. Expectations: ``calls`` (each a tool and an arguments
subset; a dry run's would-call counts as the call), ``no_calls`` (tools), ``answer_contains``
(texts, case-insensitive) and ``validator`` (a completion validator's dotted path: its
objection is a failure). Who: holders of ``runs.add_suite`` (operators and admins).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from django.conf import settings
from django.db import transaction
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentweb.runs import agents, lifecycle, versions
from agentweb.runs.errors import InvalidArguments, NotAllowed, NotFound
from agentweb.runs.forks import InvalidFork
from agentweb.runs.models import (
    AgentProfile,
    Experiment,
    ExperimentCase,
    Run,
    RunEvent,
    Suite,
)
from agentweb.runs.strict_input import StrictInput
from agentweb.runtime.state import LoopState
from agentweb.tickets.models import Ticket

MAX_CASES = 500


class ExpectCall(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    tool: str
    arguments: dict[str, Any] | None = Field(None, description="a subset of the call's arguments")


class Expect(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    calls: list[ExpectCall] | None = None
    no_calls: list[str] | None = None
    answer_contains: list[str] | None = None
    validator: str | None = None


class Case(BaseModel):
    # exactly one of task (not empty), ticket or run, as do_create_suite counts them
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["task"], "properties": {"task": {"type": "string", "minLength": 1}}},
                {"required": ["ticket"], "properties": {"ticket": {"type": "integer"}}},
                {"required": ["run"], "properties": {"run": {"type": "integer"}}},
            ]
        },
    )
    name: str = Field(min_length=1, max_length=200)
    task: str | None = None
    ticket: int | None = None
    run: int | None = None
    expect: Expect = Field(default_factory=Expect)


class CreateSuite(StrictInput):
    """A suite: a name and its cases (each one of task, ticket or run)."""

    name: str = Field(min_length=1, max_length=100)
    cases: list[Case] = Field(min_length=1, max_length=MAX_CASES)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Self:
        unknown = sorted(str(k) for k in data if k not in cls.model_fields)
        if unknown:
            raise InvalidArguments(f"unknown keys: {', '.join(unknown)}; known: name, cases")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors()
            extra = [e for e in errors if e["type"] == "extra_forbidden"]
            raise InvalidArguments(_said((extra or errors)[0])) from None


def _said(error: Mapping[str, Any]) -> str:
    """One pydantic error in words, with where: ``cases[2].expect: unknown key 'x'``."""
    loc = list(error["loc"])
    where = ""
    for part in loc[:-1] if error["type"] == "extra_forbidden" else loc:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    if error["type"] == "extra_forbidden":
        models: dict[str, type[BaseModel]] = {"expect": Expect, "calls": ExpectCall}
        parent = next((p for p in reversed(loc[:-1]) if isinstance(p, str)), "cases")
        known = ", ".join((models.get(parent) or Case).model_fields)
        return f"{where}: unknown key {loc[-1]!r}; known: {known}"
    return f"{where}: {error['msg']}"


class StartExperiment(StrictInput):
    """Run every case of a suite as a dry run of this profile (version, model)."""

    agent: str
    version: int | None = Field(None, description="default: the profile's newest")
    model: str | None = Field(None, description="default: the version's, else AGENTWEB_MODEL")


def check_may(user: Any) -> None:
    if not user.has_perm("runs.add_suite"):
        raise NotAllowed("only operators and admins use suites and experiments")


def do_create_suite(user: Any, body: CreateSuite) -> Suite:
    """Store a suite after checking every case (its ticket or run must be one the user
    sees; a validator must load); nothing is stored when one is wrong."""
    check_may(user)
    name = body.name.strip()
    if Suite.objects.filter(name=name).exists():
        raise InvalidArguments(f"a suite named {name!r} exists")
    _check_cases(user, body.cases)
    cases = [c.model_dump(exclude_none=True) for c in body.cases]
    return Suite.objects.create(name=name, cases=cases, created_by=user)


def do_add_case(user: Any, suite_name: str, case: dict[str, Any]) -> Suite:
    """Add one case to the suite ``suite_name`` (made when there is none): the run page's
    "Add to suite". Checked as a new suite's cases are."""
    check_may(user)
    body = CreateSuite.parse({"name": suite_name, "cases": [case]})
    _check_cases(user, body.cases)
    with transaction.atomic():
        suite = Suite.objects.select_for_update().filter(name=body.name.strip()).first()
        if suite is None:
            return do_create_suite(user, body)
        suite.cases = [*suite.cases, body.cases[0].model_dump(exclude_none=True)]
        suite.save(update_fields=["cases"])
        return suite


def expect_from_run(run: Run) -> dict[str, Any]:
    """A case's expectation from a run: its calls (tool and arguments), in order."""
    calls = [
        {"tool": str(d.get("tool", "")), "arguments": d.get("arguments") or {}}
        for d in RunEvent.objects.filter(run=run, type="tool_call_started")
        .order_by("seq")
        .values_list("data", flat=True)
    ]
    return {"calls": calls} if calls else {}


def _check_cases(user: Any, cases: list[Case]) -> None:
    visible_runs = Run.objects.visible_to(user)
    for i, case in enumerate(cases):
        given = [k for k in ("task", "ticket", "run") if getattr(case, k) not in (None, "")]
        if len(given) != 1:
            raise InvalidArguments(f"cases[{i}]: give exactly one of task, ticket or run")
        if (
            case.ticket is not None
            and not Ticket.objects.visible_to(user).filter(pk=case.ticket).exists()
        ):
            raise InvalidArguments(f"cases[{i}].ticket: no ticket {case.ticket}")
        if case.run is not None and not visible_runs.filter(pk=case.run).exists():
            raise InvalidArguments(f"cases[{i}].run: no run {case.run}")
        if case.expect.validator:
            problem = agents.validator_problem(case.expect.validator)
            if problem:
                raise InvalidArguments(f"cases[{i}].expect.validator: {problem}")


def do_start_experiment(user: Any, suite: Suite, body: StartExperiment) -> Experiment:
    """An experiment and one dry run per case, all queued at once (the workers play them
    in parallel). An unknown agent, version or model: 422, nothing created."""
    check_may(user)
    profile = AgentProfile.objects.filter(name=body.agent).first()
    if profile is None:
        raise InvalidFork(f"unknown agent {body.agent!r}")
    chosen = versions.get(profile, body.version) if body.version else versions.current(profile)
    if body.model is not None and (problem := agents.model_problem(body.model)):
        raise InvalidFork(f"model: {problem}")
    spec = body.model or chosen.data.get("model") or settings.AGENTWEB_MODEL
    with transaction.atomic():
        experiment = Experiment.objects.create(
            suite=suite, agent=profile, version=chosen.n, model=spec, created_by=user
        )
        for index, case in enumerate(suite.cases):
            run, error = _start_case(user, experiment, case)
            ExperimentCase.objects.create(
                experiment=experiment, index=index, name=case["name"], run=run, error=error
            )
    return experiment


def _start_case(user: Any, experiment: Experiment, case: dict[str, Any]) -> tuple[Run | None, str]:
    fields: dict[str, Any] = {
        "agent": experiment.agent,
        "agent_version": experiment.version,
        "mode": Run.Mode.DRY,
        "model": experiment.model,
        "created_by": user,
    }
    if "run" in case:
        source = Run.objects.filter(pk=case["run"]).first()
        if source is None or source.last_seq < 1:
            return None, f"run {case['run']} is gone or has no events"
        first = RunEvent.objects.filter(run=source, seq=1).first()
        run = lifecycle.create(
            task=source.task,
            ticket_id=source.ticket_id,
            forked_from=source,
            forked_at_seq=1,
            last_seq=1,
            **fields,
        )
        if first is not None:
            RunEvent.objects.create(run=run, seq=1, type=first.type, data=first.data)
        return run, ""
    if "ticket" in case:
        ticket = Ticket.objects.filter(pk=case["ticket"]).first()
        if ticket is None:
            return None, f"ticket {case['ticket']} is gone"
        return lifecycle.create(task=ticket.as_task(), ticket=ticket, **fields), ""
    return lifecycle.create(task=str(case.get("task", "")), **fields), ""


# --- scoring ----------------------------------------------------------------------------


def _subset(wanted: Mapping[str, Any], arguments: Mapping[str, Any]) -> bool:
    return all(k in arguments and arguments[k] == v for k, v in wanted.items())


def score(
    case: dict[str, Any], run: Run | None, error: str = ""
) -> tuple[bool | None, list[str], list[str]]:
    """(passed, failures in words, the tools called) of one case's run; passed None while
    it runs."""
    if run is None:
        return False, [error or "the case did not start"], []
    if run.status in Run.ACTIVE:
        return None, [], []
    failures: list[str] = []
    if run.status != Run.Status.SUCCEEDED:
        failures.append(f"the run {run.status}: {run.failure_reason or 'no answer'}")
    after = run.forked_at_seq or 0
    calls = [
        (str(d.get("tool", "")), d.get("arguments") or {})
        for d in RunEvent.objects.filter(run=run, type="tool_call_started", seq__gt=after)
        .order_by("seq")
        .values_list("data", flat=True)
    ]
    made = ", ".join(t for t, _ in calls) or "none"
    expect = case.get("expect") or {}
    for wanted in expect.get("calls") or []:
        tool, args = wanted["tool"], wanted.get("arguments") or {}
        if not any(t == tool and _subset(args, a) for t, a in calls):
            shown = f" with {args}" if args else ""
            failures.append(f"expected a call to {tool}{shown}; calls made: {made}")
    for tool in expect.get("no_calls") or []:
        if any(t == tool for t, _ in calls):
            failures.append(f"called {tool}, which this case must not")
    answer = run.final_answer or ""
    for text in expect.get("answer_contains") or []:
        if text.casefold() not in answer.casefold():
            failures.append(f"the answer does not contain {text!r}")
    if expect.get("validator") and run.status == Run.Status.SUCCEEDED:
        check = agents.load_validator(expect["validator"])
        state = LoopState.from_json(run.state) if run.state else LoopState()
        objection = check(answer, state)
        if objection:
            failures.append(f"validator {expect['validator']}: {objection}")
    return not failures, failures, [t for t, _ in calls]


def experiment_json(experiment: Experiment) -> dict[str, Any]:
    """``GET /api/experiments/{id}``: every case with its run, result and cost."""
    rows = list(experiment.cases.select_related("run").order_by("index"))
    by_index = {i: c for i, c in enumerate(experiment.suite.cases)}
    cases: list[dict[str, Any]] = []
    for row in rows:
        run = row.run
        passed, failures, tools = score(by_index.get(row.index, {}), run, row.error)
        usage = (run.usage or {}) if run else {}
        duration = None
        if run and run.started_at and run.finished_at:
            duration = round((run.finished_at - run.started_at).total_seconds() * 1000, 1)
        cases.append(
            {
                "name": row.name,
                "run": run.pk if run else None,
                "status": run.status if run else "failed",
                "passed": passed,
                "failures": failures,
                "tokens": int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)),
                "cost_usd": usage.get("cost_usd"),
                "duration_ms": duration,
                "calls": tools,
            }
        )
    if any(c["passed"] is None for c in cases):
        started = any(c["status"] not in ("queued",) for c in cases)
        status = "running" if started else "queued"
    else:
        status = "failed" if rows and all(r.run is None for r in rows) else "done"
    return {
        "id": experiment.pk,
        "suite": experiment.suite.name,
        "agent": experiment.agent.name,
        "version": experiment.version,
        "model": experiment.model,
        "status": status,
        "created_at": experiment.created_at.isoformat(),
        "cases": cases,
        "passed": sum(1 for c in cases if c["passed"]),
        "total": len(cases),
    }


def get_suite(name: str) -> Suite:
    found = Suite.objects.filter(name=name).first()
    if found is None:
        raise NotFound(f"no suite {name!r}")
    return found


def get_experiment(experiment_id: int) -> Experiment:
    found = (
        Experiment.objects.select_related("suite", "agent").filter(pk=experiment_id).first()
        if 0 < experiment_id < 2**63
        else None
    )
    if found is None:
        raise NotFound(f"no experiment {experiment_id}")
    return found


def suite_json(suite: Suite) -> dict[str, Any]:
    return {
        "name": suite.name,
        "cases": suite.cases,
        "created_by": suite.created_by.get_username(),
        "created_at": suite.created_at.isoformat(),
        "experiments": list(suite.experiments.order_by("-created_at").values_list("pk", flat=True)),
    }
