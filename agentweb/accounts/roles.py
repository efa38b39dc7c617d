"""The three roles and what each may do."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from agentweb.accounts.models import ROLE_ADMIN, ROLE_APPROVER, ROLE_OPERATOR

# codename -> roles that hold it (on the runs app, or "app.codename" on another app).
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "add_run": (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN),
    "view_run": (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN),
    "cancel_run": (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN),
    "view_all_runs": (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN),
    "view_approval": (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN),
    "decide_approval": (ROLE_APPROVER, ROLE_ADMIN),
    "change_agentprofile": (ROLE_ADMIN,),
    "add_agentprofile": (ROLE_ADMIN,),
    "view_agentprofile": (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN),
    # suites and experiments (DESIGN §14): operators and admins
    "add_suite": (ROLE_OPERATOR, ROLE_ADMIN),
    "tickets.view_ticket": (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN),
    "tickets.add_ticket": (ROLE_OPERATOR, ROLE_ADMIN),
    "tickets.change_ticket": (ROLE_OPERATOR, ROLE_ADMIN),
    # Once teams exist, everyone else sees their teams' tickets, runs and approvals only.
    "teams.view_all_teams": (ROLE_ADMIN,),
}


def _qualified(name: str) -> tuple[str, str]:
    app, _, codename = name.rpartition(".")
    return app or "runs", codename


def ensure_roles() -> dict[str, Group]:
    groups = {
        name: Group.objects.get_or_create(name=name)[0]
        for name in (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN)
    }
    wanted = {_qualified(name): name for name in ROLE_PERMISSIONS}
    perms = {
        wanted[(p.content_type.app_label, p.codename)]: p
        for p in Permission.objects.select_related("content_type").filter(
            content_type__app_label__in={app for app, _ in wanted},
            codename__in={codename for _, codename in wanted},
        )
        if (p.content_type.app_label, p.codename) in wanted
    }
    missing = set(ROLE_PERMISSIONS) - set(perms)
    if missing:
        raise RuntimeError(f"permissions missing (migrate first?): {sorted(missing)}")
    for codename, roles in ROLE_PERMISSIONS.items():
        for role in roles:
            groups[role].permissions.add(perms[codename])
    return groups


def start_page(user: Any) -> str:
    """Where a person lands after signing in: approvers on what waits for them."""
    if user.has_perm("runs.decide_approval") and not user.has_perm("runs.change_agentprofile"):
        return reverse("web:approvals")
    return reverse("web:tickets")
