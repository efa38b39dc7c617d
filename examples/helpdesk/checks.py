"""A completion validator for the helpdesk profile: an answer may only say a password
was reset, an account unlocked or a licence assigned when that tool call succeeded in
this run. ``validator(answer, state)`` returns None to accept, or the reason the answer
goes back to the model (stored as a ``completion_objected`` event)."""

from __future__ import annotations

import re
from typing import Any

from agentweb.runtime import AssistantMessage, ToolMessage

CLAIMS = {
    "reset_password": re.compile(
        r"\bpassword (?:has been |was )?reset\b|\breset link went\b", re.I
    ),
    "unlock_account": re.compile(r"\bunlocked\b", re.I),
    "assign_licence": re.compile(r"\bassigned an? \S+ licen[cs]e\b", re.I),
}
NEGATED = re.compile(r"\b(?:not|no|never|rejected)\b", re.I)


def claims_done(answer: str, state: Any) -> str | None:
    succeeded: set[str] = set()
    calls: dict[str, str] = {}
    for m in state.messages:
        if isinstance(m, AssistantMessage):
            calls.update({c.id: c.name for c in m.tool_calls})
        elif isinstance(m, ToolMessage) and not m.is_error and m.call_id in calls:
            succeeded.add(calls[m.call_id])
    if NEGATED.search(answer):
        return None
    missing = [tool for tool, rx in CLAIMS.items() if rx.search(answer) and tool not in succeeded]
    if not missing:
        return None
    return (
        f"Your answer says {', '.join(missing)} happened, but no such call succeeded in this "
        "run. Only state what a tool confirmed."
    )
