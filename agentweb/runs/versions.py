"""Profile versions (DESIGN §14): every save of an agent profile is an immutable
``ProfileVersion``; a run records the version it ran and runs that version's fields
even when the profile changes under it; two versions can be compared field by field;
restoring one saves its fields as a new version.

``record`` is called by ``actions.do_save_profile`` (the page, the API, ``agents
import``) in the save's transaction; ``current`` also covers profiles written another
way (``seed_profiles``, the admin): a run's version is always one whose fields are the
profile's as the run started.
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max

from agentweb.budgets.limits import limits_json
from agentweb.runs.api_input import ReplaceProfile
from agentweb.runs.errors import NotFound
from agentweb.runs.models import AgentProfile, ProfileVersion

#: The largest version number a PositiveIntegerField holds (larger ones are no version).
MAX_N = 2**31 - 1


def snapshot(profile: AgentProfile) -> dict[str, Any]:
    """The profile's fields as ``GET /api/agents/{name}`` gives them (no ``updated_at``)."""
    return {
        "name": profile.name,
        "description": profile.description,
        "system_prompt": profile.system_prompt,
        "model": profile.model or None,
        "allowed_tools": list(profile.allowed_tools or []),
        "tool_selection": profile.top_n or "all",
        "validator": profile.validator or None,
        "approval_policies": dict(profile.approval_policies or {}),
        "risk_overrides": dict(profile.risk_overrides or {}),
        "max_iterations": profile.max_iterations,
        "context_budget_tokens": profile.context_budget_tokens,
        "delegates": list(profile.delegates or []),
        "vision": profile.vision,
        "budget": limits_json(profile.budget),
    }


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, default=str)


def record(
    profile: AgentProfile, *, actor: Any = None, restored_from: int | None = None
) -> ProfileVersion:
    """A new version of ``profile`` as it is now (inside the save's transaction; the
    profile's row is locked so two saves get 1, 2 and never the same number)."""
    with transaction.atomic():
        AgentProfile.objects.select_for_update().filter(pk=profile.pk).values("pk").first()
        last = ProfileVersion.objects.filter(profile=profile).aggregate(n=Max("n"))["n"] or 0
        return ProfileVersion.objects.create(
            profile=profile,
            n=last + 1,
            data=snapshot(profile),
            saved_by=actor if getattr(actor, "pk", None) else None,
            restored_from=restored_from,
        )


def current(profile: AgentProfile) -> ProfileVersion:
    """The version a run started now runs: the newest, or a new one when the profile was
    changed without one (a profile seeded or edited in the admin)."""
    latest = ProfileVersion.objects.filter(profile=profile).order_by("-n").first()
    if latest is not None and _canonical(latest.data) == _canonical(snapshot(profile)):
        return latest
    return record(profile)


def listing(profile: AgentProfile) -> list[ProfileVersion]:
    """Every version of ``profile``, newest first."""
    return list(ProfileVersion.objects.filter(profile=profile).select_related("saved_by"))


def get(profile: AgentProfile, n: int) -> ProfileVersion:
    """Version ``n`` of ``profile``, or ``NotFound`` saying which versions there are."""
    found: ProfileVersion | None = None
    if 1 <= n <= MAX_N:
        rows = ProfileVersion.objects.filter(profile=profile, n=n).select_related("saved_by")
        found = rows.first()
    if found is None:
        last = ProfileVersion.objects.filter(profile=profile).aggregate(n=Max("n"))["n"]
        have = f"versions 1 to {last}" if last else "no versions"
        raise NotFound(f"agent {profile.name!r} has no version {n} ({have})")
    return found


def apply(profile: AgentProfile, data: dict[str, Any]) -> AgentProfile:
    """An unsaved copy of ``profile`` (same id and name) with the fields of a version's
    ``data``: what a run of that version is built from. Raises ``ValueError`` when the
    data does not read as a profile (it was stored by this code, so it should)."""
    values, errors = ReplaceProfile.read({**data, "name": profile.name})
    if errors:
        raise ValueError(f"version data of {profile.name}: {errors}")
    copy = AgentProfile(pk=profile.pk, name=profile.name, updated_at=profile.updated_at)
    for key, default in ReplaceProfile.defaults().items():
        setattr(copy, key, default)
    for key, value in values.items():
        setattr(copy, key, value)
    copy._state.adding = False
    copy._state.db = profile._state.db
    return copy


def profile_for_run(profile: AgentProfile, version: int | None) -> AgentProfile:
    """The profile a run of ``version`` runs with: that version's fields (the profile
    itself when the run has none, or the version is gone)."""
    if version is None:
        return profile
    data = _version_data(profile.pk, version)
    if data is None:
        return profile
    return apply(profile, copy.deepcopy(data))


#: Version data by (profile id, n), as read once: a version never changes (a trigger
#: refuses an UPDATE of its row), so every run of it after the first in a process is
#: built without asking the database.
_VERSIONS: dict[tuple[int, int], dict[str, Any]] = {}
_VERSIONS_KEPT = 256


def forget_kept() -> None:
    """Read every version from the database again (for tests, whose rolled-back
    transactions reuse version numbers)."""
    _VERSIONS.clear()


def _version_data(profile_id: int, n: int) -> dict[str, Any] | None:
    key = (profile_id, n)
    data = _VERSIONS.get(key)
    if data is None:
        found = ProfileVersion.objects.filter(profile_id=profile_id, n=n).only("data").first()
        if found is None:
            return None  # not kept: a version saved later under this number is read then
        if len(_VERSIONS) >= _VERSIONS_KEPT:
            _VERSIONS.clear()
        data = _VERSIONS[key] = found.data
    return data


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field that differs between two versions; ``lines`` is a unified diff for the
    system prompt (and any long text), else ``before``/``after`` as JSON."""

    field: str
    before: str
    after: str
    lines: list[tuple[str, str]]  # (kind: "add" | "del" | "ctx" | "hunk", text)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[FieldChange]:
    """What changed from version data ``a`` to ``b``, field by field, in the fields'
    order; multi-line values get line diffs."""
    out: list[FieldChange] = []
    for field in [*a.keys(), *(k for k in b if k not in a)]:
        before, after = a.get(field), b.get(field)
        if _canonical(before) == _canonical(after):
            continue
        left, right = _shown(before), _shown(after)
        lines: list[tuple[str, str]] = []
        if "\n" in left or "\n" in right:
            for line in list(
                difflib.unified_diff(left.splitlines(), right.splitlines(), lineterm="", n=2)
            )[2:]:
                kind = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")
                lines.append((kind, line))
        out.append(FieldChange(field, left, right, lines))
    return out
