"""The query parameters of the runs' list endpoints, one model each: ``api.py`` reads a
query with ``Model.parse(request.GET)``, ``openapi.py`` lists its parameters with
``query_parameters(Model)`` (``api_input.Query``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentweb.middleware import MAX_INT
from agentweb.runs.api_input import OneOf, Query
from agentweb.runs.follow_up import OUTCOMES
from agentweb.runs.models import Approval, Run

MAX_RUNS = 200
MAX_APPROVALS = 500


class ListRuns(Query):
    status: Annotated[str | None, OneOf(Run.Status.values, "status")] = None
    q: str = Field("", description="Text in the task or the final answer")
    outcome: Annotated[str | None, OneOf(OUTCOMES, "outcome")] = Field(
        None,
        description="needs_follow_up: succeeded runs with an action rejected, failed or "
        "expired (see each run's actions)",
    )
    limit: int = Field(50, ge=0, le=MAX_RUNS, description="at most this many, newest first")


class ListEvents(Query):
    after: int = Field(0, ge=0, le=MAX_INT, description="events with a greater seq, in order")


class ListApprovals(Query):
    status: Annotated[str | None, OneOf(Approval.Status.values, "status")] = None
    limit: int = Field(100, ge=0, le=MAX_APPROVALS, description="at most this many, oldest first")
