"""`manage.py seed_demo`: demo users, agent profiles, the demo shop and its tickets (the
shop's command: the runs app knows nothing of the shop)."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from agentweb.accounts.roles import ensure_roles
from agentweb.runs.profiles import seed_profiles
from agentweb.shop.demo_data import seed_shop

DEMO_USERS = (
    ("operator", "operator", False),
    ("approver", "approver", False),
    ("admin", "admin", True),
)


class Command(BaseCommand):
    help = (
        "Create demo users (operator, approver, admin), agent profiles, the demo shop and "
        "its tickets."
    )

    def handle(self, *args: object, **opts: object) -> None:
        password = os.environ.get("AGENTWEB_DEMO_PASSWORD") or ""
        generated = not password
        if generated:
            password = secrets.token_urlsafe(9)
        User = get_user_model()
        with transaction.atomic():
            groups = ensure_roles()
            for username, role, is_admin in DEMO_USERS:
                user, created = User.objects.get_or_create(
                    username=username, defaults={"email": f"{username}@example.com"}
                )
                if created or generated or os.environ.get("AGENTWEB_DEMO_PASSWORD"):
                    user.set_password(password)
                user.is_staff = user.is_superuser = is_admin
                user.save()
                user.groups.add(groups[role])
            seed_profiles()
        counts = seed_shop()
        summary = ", ".join(f"{v} {k}" for k, v in counts.items())
        if not opts.get("verbosity", 1) and not generated:
            return  # `make run` prints the logins itself
        self.stdout.write(f"demo shop: {summary}")
        self.stdout.write(
            "demo users: operator, approver, admin — password: "
            + (password if generated else "(from AGENTWEB_DEMO_PASSWORD)")
        )
