"""The history of an agent profile on its page (DESIGN §14): every saved version, a
diff of any two, and restoring one (saved as a new version)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from agentweb.runs import actions, profiles, versions
from agentweb.runs.models import AgentProfile


def _n(raw: str | None) -> int | None:
    text = (raw or "").strip()
    if text.isascii() and text.isdecimal() and len(text) <= 9:
        return int(text)
    return None


def history_context(profile: AgentProfile, query: Any) -> dict[str, Any]:
    """What the page's history section shows: the versions (newest first) and, for
    ``?a=&b=`` (default: the two newest), what changed from a to b."""
    found = versions.listing(profile)
    by_n = {v.n: v for v in found}
    a, b = _n(query.get("a")), _n(query.get("b"))
    if b not in by_n:
        b = found[0].n if found else None
    if a not in by_n:
        a = found[1].n if len(found) > 1 else b
    changes: list[versions.FieldChange] = []
    if a is not None and b is not None and a != b:
        changes = versions.diff(by_n[a].data, by_n[b].data)
    return {"versions": found, "diff_a": a, "diff_b": b, "changes": changes}


@login_required
@require_POST
@permission_required("runs.change_agentprofile", raise_exception=True)
def restore(request: HttpRequest, agent_id: int, n: int) -> HttpResponse:
    """Save version ``n`` as the profile's newest version."""
    profile = get_object_or_404(AgentProfile, pk=agent_id)
    try:
        saved = profiles.restore_version(profile, n, actor=request.user)
    except actions.NotFound as exc:
        messages.error(request, f"Not restored: {exc}.")
    except profiles.ProfileInvalid as exc:
        messages.error(request, f"Not restored: version {n} no longer passes the checks: {exc}.")
    else:
        latest = versions.listing(saved)[0].n
        messages.success(request, f"Restored version {n} of {profile.name} as version {latest}.")
    return redirect("web:agent_edit", profile.pk)
