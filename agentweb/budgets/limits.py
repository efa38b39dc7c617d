"""A profile's ``budget`` value: its keys, its checks, its stored form (no models here, so
the profile code can use it without an import circle)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KEYS = ("max_cost_usd_per_run", "max_tokens_per_run", "daily_cost_usd")


def budget_problem(value: Any) -> str | None:
    """What is wrong with a profile's ``budget`` value, or None."""
    if value in (None, {}):
        return None
    if not isinstance(value, dict):
        return f"an object with any of {', '.join(KEYS)}"
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        return f"unknown keys: {', '.join(unknown)}; known: {', '.join(KEYS)}"
    for key, limit in value.items():
        if limit is None:
            continue
        if key == "max_tokens_per_run":
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                return f"{key} must be a whole number of tokens, 1 or more"
        elif (
            not isinstance(limit, int | float)
            or isinstance(limit, bool)
            or limit != limit  # NaN
            or limit < 0
            or limit > 1e9
        ):
            return f"{key} must be a number of US dollars, 0 or more"
    return None


def limits_json(budget: Mapping[str, Any] | None) -> dict[str, Any]:
    """A profile's budget as stored: the keys that are set."""
    return {k: v for k, v in (budget or {}).items() if k in KEYS and v is not None}
