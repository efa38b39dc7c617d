"""Rules that start runs (DESIGN §11): ``AGENTWEB_INTAKE_RULES`` first, then the rules of
``/admin/`` (``IntakeRule``), each ``{"queue"?, "tag"?, "agent", "mode"}``.

``auto``: when a ticket arrives or its customer writes again (``actions.on_arrival``, after
the commit that stored it), the first matching ``auto`` rule starts a run of its profile
on the ticket, through ``runs.actions.do_create_run`` like any other start: one active run
per ticket still holds (a busy ticket starts nothing), and a closed ticket none.
``suggest``: the ticket page offers a "Start <agent>" button.

Runs that a rule starts are started by the ``intake`` account: it cannot sign in (no
usable password) and may start runs and see every ticket, nothing else; approvals of its
runs are open to every approver (nobody is their starter).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db import IntegrityError, transaction

from agentweb.runs import actions as run_actions
from agentweb.runs.errors import ActionError, TicketBusy
from agentweb.runs.models import AgentProfile
from agentweb.tickets import actions
from agentweb.tickets.config import IntakeRule as Rule
from agentweb.tickets.models import IntakeRule, Ticket

log = logging.getLogger(__name__)

INTAKE_USER = "intake"
_PERMISSIONS = (
    ("runs", "add_run"),
    ("runs", "view_run"),
    ("runs", "view_all_runs"),
    ("teams", "view_all_teams"),  # every queue's tickets, once teams exist
)


def rules() -> list[Rule]:
    """Every rule in the order they apply: the setting's, then the enabled stored ones."""
    stored = [
        Rule(agent=r.agent, mode=r.mode, queue=r.queue, tag=r.tag)
        for r in IntakeRule.objects.filter(enabled=True)
    ]
    return [*settings.AGENTWEB_INTAKE_RULES, *stored]


def matching(ticket: Ticket, mode: str | None = None) -> list[Rule]:
    return [
        r
        for r in rules()
        if (mode is None or r.mode == mode) and r.matches(ticket.queue, list(ticket.tags))
    ]


def suggested_agents(ticket: Ticket) -> list[str]:
    """The profiles the ticket page offers as "Start <agent>" (suggest and auto rules)."""
    names = list(dict.fromkeys(r.agent for r in matching(ticket)))
    known = set(AgentProfile.objects.filter(name__in=names).values_list("name", flat=True))
    return [n for n in names if n in known]


def intake_user() -> User:
    """The account auto runs are started by (made on first use)."""
    user = User.objects.filter(username=INTAKE_USER).first()
    if user is None:
        try:
            with transaction.atomic():
                user = User(username=INTAKE_USER, first_name="Intake rules")
                user.set_unusable_password()
                user.save()
        except IntegrityError:  # made at the same moment by another arrival
            user = User.objects.get(username=INTAKE_USER)
        perms = [
            p
            for p in Permission.objects.select_related("content_type").filter(
                content_type__app_label__in={app for app, _ in _PERMISSIONS}
            )
            if (p.content_type.app_label, p.codename) in _PERMISSIONS
        ]
        user.user_permissions.add(*perms)
        user = User.objects.get(pk=user.pk)  # a fresh permission cache
    return user


def ticket_arrived(ticket_id: int, message_id: int | None, created: bool) -> None:
    """After commit: a new ticket, or a new incoming message on one. Never raises."""
    if not created and message_id is None:
        return  # a change of status, queue or tags, or one of our replies
    ticket = Ticket.objects.filter(pk=ticket_id).first()
    if ticket is None or ticket.status == Ticket.Status.CLOSED:
        return
    rule = next(iter(matching(ticket, "auto")), None)
    if rule is None:
        return
    try:
        run = run_actions.do_create_run(
            user=intake_user(), task="", agent_name=rule.agent, ticket_id=ticket.pk
        )
    except TicketBusy:
        log.debug("ticket %s has an active run: the rule starts none", ticket.pk)
        return
    except ActionError as exc:
        log.warning(
            "intake rule %s could not start a run on ticket %s: %s", rule.as_json(), ticket.pk, exc
        )
        return
    log.info("intake rule %s started run %s on ticket %s", rule.as_json(), run.pk, ticket.pk)


def install() -> None:
    actions.on_arrival(ticket_arrived)
