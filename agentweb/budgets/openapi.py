"""The budgets' part of the OpenAPI document: the spend report's schema is generated from
the pydantic models the API builds its answer with (``report.SpendReport``)."""

from __future__ import annotations

from typing import Any

from agentweb.budgets.report import SpendReport
from agentweb.budgets.views import SpendQuery
from agentweb.runs.api_input import query_parameters


def _untitled(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untitled(v) for k, v in value.items() if k != "title"}
    if isinstance(value, list):
        return [_untitled(v) for v in value]
    return value


_SCHEMA = _untitled(SpendReport.model_json_schema(ref_template="#/components/schemas/{model}"))
SCHEMAS: dict[str, Any] = {
    "SpendReport": {k: v for k, v in _SCHEMA.items() if k != "$defs"},
    **_SCHEMA.get("$defs", {}),
}


def _error(text: str) -> dict[str, Any]:
    schema = {"$ref": "#/components/schemas/Error"}
    return {"description": text, "content": {"application/json": {"schema": schema}}}


PATHS: dict[str, Any] = {
    "/api/spend": {
        "get": {
            "summary": "What model calls cost on a day, per team and per profile (admins)",
            "parameters": query_parameters(SpendQuery),
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/SpendReport"}}
                    },
                },
                "400": _error("Bad request (day is not a date)"),
                "401": _error("Not authenticated"),
                "403": _error("Not an admin"),
            },
        }
    }
}
