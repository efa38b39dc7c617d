"""How people decide a tool's calls: the host's part of an approval policy.

The runtime's gate (``agentweb.runtime.approvals``) decides whether a person must look at
a call; a policy may also say how many distinct people must approve it (a quorum) and
after how many minutes a request nobody decided escalates. Those keys are taken out
before the gate reads the policy, and applied here, by the decision action and by the
notifications. A leaf: it imports nothing of the app.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Keys of a policy that say how people decide, which the host applies (the runtime's
#: gate only decides whether a person must): how many distinct people must approve, and
#: after how many minutes a still pending request escalates.
PEOPLE_KEYS = frozenset({"approvers", "escalate_after_minutes"})
MAX_APPROVERS = 10


@dataclass(frozen=True, slots=True)
class People:
    approvers: int = 1
    escalate_after_minutes: float | None = None


def split_policy(rule: Any) -> tuple[Any, People]:
    """A profile's policy for one tool as the runtime's gate reads it, and its people part:
    ``{"argument": "amount", "at_least": 100, "approvers": 2}`` → the threshold rule and
    two approvers; ``{"approvers": 2}`` alone → ``"always"`` and two approvers. Raises
    ``ValueError`` for a bad people part."""
    if not isinstance(rule, Mapping) or not PEOPLE_KEYS & set(rule):
        return rule, People()
    approvers = rule.get("approvers", 1)
    if isinstance(approvers, bool) or not isinstance(approvers, int):
        raise ValueError("approvers must be a whole number of people")
    if not 1 <= approvers <= MAX_APPROVERS:
        raise ValueError(f"approvers must be from 1 to {MAX_APPROVERS}")
    minutes = rule.get("escalate_after_minutes")
    if minutes is not None:
        if isinstance(minutes, bool) or not isinstance(minutes, int | float):
            raise ValueError("escalate_after_minutes must be a number of minutes")
        if not math.isfinite(minutes) or minutes <= 0:
            raise ValueError("escalate_after_minutes must be more than 0")
    rest = {key: value for key, value in rule.items() if key not in PEOPLE_KEYS}
    people = People(approvers, float(minutes) if minutes is not None else None)
    return (rest or "always"), people


def runtime_policies(policies: Any) -> dict[str, Any]:
    """The profile's ``approval_policies`` as the runtime's gate reads them (people keys
    taken out). A policy whose people part is unreadable stays as it is: the gate then
    finds it unreadable and asks a person (fail closed)."""
    out: dict[str, Any] = {}
    for name, rule in (policies or {}).items() if isinstance(policies, dict) else ():
        try:
            out[name] = split_policy(rule)[0]
        except ValueError:
            out[name] = rule
    return out


def people_for(policies: Any, tool: str) -> People:
    """How people decide calls of ``tool`` under a profile's ``approval_policies``."""
    rule = policies.get(tool) if isinstance(policies, dict) else None
    try:
        return split_policy(rule)[1]
    except ValueError:
        return People()
