from typing import Any

from django.http import HttpRequest

from agentweb.runs.models import Approval


def decidable_pending(user: Any) -> Any:
    """Pending approvals this user may decide (``Approval.objects.decidable_by``: none
    without the permission, only their teams' runs, never their own runs' calls)."""
    return Approval.objects.decidable_by(user)


def pending_count(user: Any) -> int:
    """What the Approvals badge shows: what is waiting for this user's decision."""
    return int(decidable_pending(user).count())


def navigation(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    path = request.path
    return {
        "nav_section": next(
            (
                s
                for s in ("tickets", "runs", "approvals", "agents", "spend")
                if path.startswith(f"/{s}/")
            ),
            "",
        ),
        "nav_pending": pending_count(user),
        "nav_is_admin": user.has_perm("runs.change_agentprofile"),
        "nav_sees_spend": user.has_perm("teams.view_all_teams"),
        # Without a role no section opens: the menu shows none of them.
        "nav_has_role": user.has_perm("runs.view_run"),
        "nav_can_decide": user.has_perm("runs.decide_approval"),
        "nav_roles": ", ".join(g.name for g in user.groups.all()) or "no role",
    }
