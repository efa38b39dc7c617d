"""``manage.py teams add NAME --queues q1,q2 --members u1,u2 [--daily-cost-usd X]``, and
``set`` (change what is given), ``list``, ``remove``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentweb.teams import actions
from agentweb.teams.models import Team


def _csv(value: str | None) -> list[str] | None:
    return None if value is None else [v for v in (p.strip() for p in value.split(",")) if v]


class Command(BaseCommand):
    help = "Teams own ticket queues: add, set, list, remove."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="verb", required=True)
        for verb in ("add", "set"):
            p = sub.add_parser(verb, help=f"{verb} a team")
            p.add_argument("name")
            p.add_argument("--queues", help="comma-separated ticket queues the team owns")
            p.add_argument("--members", help="comma-separated usernames")
            p.add_argument(
                "--daily-cost-usd", dest="cost", help="what its runs may cost a day ('' = no limit)"
            )
        sub.add_parser("list", help="list teams")
        p = sub.add_parser("remove", help="delete a team")
        p.add_argument("name")

    def handle(self, *args: Any, **opts: Any) -> None:
        verb = opts["verb"]
        if verb == "list":
            for each in Team.objects.prefetch_related("members"):
                names = ",".join(sorted(u.username for u in each.members.all())) or "-"
                limit = f" daily_cost_usd={each.daily_cost_usd}" if each.daily_cost_usd else ""
                self.stdout.write(
                    f"{each.name}: queues={','.join(each.queues) or '-'} members={names}{limit}"
                )
            return
        team = Team.objects.filter(name=" ".join(opts["name"].split())).first()
        if verb == "remove":
            if team is None:
                raise CommandError(f"no team named {opts['name']!r}")
            actions.do_delete_team(team, actor=None)
            self.stdout.write(f"removed team {team.name}")
            return
        if verb == "add" and team is not None:
            raise CommandError(f"a team named {team.name!r} exists (change it with: teams set)")
        if verb == "set" and team is None:
            raise CommandError(f"no team named {opts['name']!r} (create it with: teams add)")
        queues = _csv(opts["queues"])
        usernames = _csv(opts["members"])
        try:
            members = actions.members_named(usernames) if usernames is not None else None
            saved = actions.do_save_team(
                team,
                actor=None,
                name=opts["name"],
                queues=queues if queues is not None else (team.queues if team else []),
                members=members,
                daily_cost_usd=opts["cost"]
                if opts["cost"] is not None
                else (team.daily_cost_usd if team else None),
            )
        except actions.TeamError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{'added' if team is None else 'changed'} team {saved.name}: "
            f"queues={','.join(saved.queues) or '-'} "
            f"members={','.join(sorted(saved.members.values_list('username', flat=True))) or '-'}"
        )
