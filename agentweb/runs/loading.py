"""Queries a worker makes for every run, with SQL the ORM compiled once per process.

``Run.objects.select_related("agent", "created_by", "ticket").get(pk=...)`` is what the
engine reads as it takes a run up. Building that query (four tables, about a hundred
columns) cost the worker about 1 ms of CPU per run, three times what PostgreSQL took to
answer it. Here the ORM compiles it once, with a stand-in for the run's id; each read
sends that SQL and turns the row into objects the way the ORM's own iterator does (its
converters, ``from_db``, its populators for the related rows), so the objects are the
ones ``get`` returns. ``CompiledRows`` does the same for a ``values_list`` query. Other apps
may have a read of their own sent in the claim's round trip (``read_with_claim``: the
teams a run's spend counts toward).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from django.db import connections
from django.db.models import QuerySet
from django.db.models.query import get_related_populators  # type: ignore[attr-defined]

from agentweb.runs.models import Run

RELATED = ("agent", "created_by", "ticket")
#: On a run its worker claimed: ``(profile id, name, budget)`` of its profile's own row as
#: the claim read it (the run may run an older version of the profile), which the budget
#: check's first look takes instead of reading it again.
CLAIMED_PROFILE = "_agentweb_claimed_profile"
_ANY_RUN = -7_000_000_003  # stands for the run's id while the query is compiled


class _Converting(NamedTuple):
    """What ``SQLCompiler.results_iter`` works out for every batch of rows it converts
    (a field's converters, looked up column by column: a tenth of a millisecond for the
    run's hundred columns), worked out once for a compiled query."""

    compiler: Any
    fields: list[Any]
    converters: dict[int, Any]
    composite: bool

    @classmethod
    def of(cls, compiler: Any) -> _Converting:
        fields = [s[0] for s in compiler.select[0 : compiler.col_count]]
        return cls(
            compiler, fields, compiler.get_converters(fields), compiler.has_composite_fields(fields)
        )

    def rows(self, fetched: Sequence[Any]) -> Iterable[Any]:
        """``compiler.results_iter(results=[fetched])``."""
        rows: Iterable[Any] = fetched
        if self.converters:
            rows = self.compiler.apply_converters(rows, self.converters)
        if self.composite:
            rows = self.compiler.composite_fields_to_tuples(rows, self.fields)
        return rows


class _Plan(NamedTuple):
    converting: _Converting  # the ORM compiler's converters, worked out once
    sql: str
    params: tuple[Any, ...]
    start: int
    end: int
    init_list: list[str]
    populators: list[Any]


@functools.cache
def _plan(alias: str) -> _Plan:
    query = Run.objects.using(alias).select_related(*RELATED).filter(pk=_ANY_RUN).query
    compiler = query.get_compiler(using=alias)
    sql, params = compiler.as_sql()  # also fills compiler.select and klass_info
    fields = compiler.klass_info["select_fields"]
    start, end = fields[0], fields[-1] + 1
    init_list = [col[0].target.attname for col in compiler.select[start:end]]
    populators = get_related_populators(compiler.klass_info, compiler.select, alias)
    converting = _Converting.of(compiler)
    return _Plan(converting, sql, tuple(params), start, end, init_list, populators)


def run_for_worker(run_id: int, alias: str = "default") -> Run:
    """``Run.objects.select_related(*RELATED).get(pk=run_id)``; ``Run.DoesNotExist`` when
    there is no such run."""
    sql, params = run_query(run_id, alias)
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return run_from_rows(run_id, rows, alias)


def run_query(run_id: int, alias: str = "default") -> tuple[str, list[Any]]:
    """The SQL and parameters of ``run_for_worker``'s read, for a caller that sends them
    with other statements (``lifecycle.claim_and_read``); its rows go to ``run_from_rows``."""
    plan = _plan(alias)
    return plan.sql, [run_id if p == _ANY_RUN else p for p in plan.params]


def run_from_rows(run_id: int, rows: Sequence[Any], alias: str = "default") -> Run:
    """The run (with its related rows) from the rows of ``run_query``."""
    if not rows:
        raise Run.DoesNotExist(f"Run matching query does not exist (id {run_id}).")
    plan = _plan(alias)
    row = next(iter(plan.converting.rows(list(rows))))
    run = Run.from_db(alias, plan.init_list, row[plan.start : plan.end])
    for populator in plan.populators:
        populator.populate(row, run)
    return run


class CompiledRows:
    """The rows of a ``values_list`` queryset, ``build(*stand_ins)``, whose SQL the ORM
    compiles once per database alias: ``rows(*values)`` sends it with each value where
    its stand-in was (also inside a list parameter, e.g. ``queues__contains=[...]``) and
    converts the rows as the ORM does. A stand-in must be a value no caller passes."""

    def __init__(self, build: Callable[..., QuerySet[Any]], stand_ins: Sequence[Any]) -> None:
        self.build = build
        self.stand_ins = tuple(stand_ins)
        self._plans: dict[str, tuple[_Converting, str, tuple[Any, ...]]] = {}

    def _plan(self, alias: str) -> tuple[_Converting, str, tuple[Any, ...]]:
        plan = self._plans.get(alias)
        if plan is None:
            query = self.build(*self.stand_ins).using(alias).query
            compiler = query.get_compiler(using=alias)
            sql, params = compiler.as_sql()
            plan = self._plans[alias] = (_Converting.of(compiler), sql, tuple(params))
        return plan

    def rows(self, *values: Any, alias: str = "default") -> list[tuple[Any, ...]]:
        converting, sql, template = self._plan(alias)
        by_stand_in = dict(zip(self.stand_ins, values, strict=True))

        def value(param: Any) -> Any:
            if isinstance(param, list):
                return [by_stand_in.get(p, p) if _hashable(p) else p for p in param]
            return by_stand_in.get(param, param) if _hashable(param) else param

        with connections[alias].cursor() as cursor:
            cursor.execute(sql, [value(p) for p in template])
            fetched = cursor.fetchall()
        return [tuple(row) for row in converting.rows(fetched)]


def _hashable(value: Any) -> bool:
    return isinstance(value, str | int)


#: Reads other apps send in the claim's round trip (``lifecycle.claim_and_read``): a
#: statement whose one parameter is the run's id, and what to keep of its rows on the run.
_WITH_CLAIM: list[tuple[str, Callable[[Run, list[tuple[Any, ...]]], None]]] = []


def read_with_claim(sql: str, keep: Callable[[Run, list[tuple[Any, ...]]], None]) -> None:
    """Send ``sql`` (one ``%s``: the run's id) with every claim; ``keep(run, rows)`` is
    called on the run the claim took. A claim whose statements cannot be sent together
    (a transaction is open: tests) does without, and ``keep`` is not called. Cheap to
    plan, please: it is sent with every claim (a PL/pgSQL function keeps its plans)."""
    if (sql, keep) not in _WITH_CLAIM:
        _WITH_CLAIM.append((sql, keep))


def claim_reads() -> list[str]:
    """The statements of the reads sent with a claim, in order (each takes the run's id)."""
    return [sql for sql, _ in _WITH_CLAIM]


def keep_claim_reads(run: Run, found: Sequence[list[tuple[Any, ...]]]) -> None:
    """Hand each read's rows (in ``claim_reads``' order) to its ``keep``."""
    for (_, keep), rows in zip(_WITH_CLAIM, found, strict=True):
        keep(run, rows)
