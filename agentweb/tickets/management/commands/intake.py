"""``manage.py intake``: where tickets come from.

    intake add-source NAME --kind generic|zendesk [--reply-url URL] [--secret-stdin]
    intake set-secret NAME [--secret-stdin]
    intake sources
    intake remove-source NAME
    intake poll                       # read the mailbox (AGENTWEB_IMAP_URL) now

A new source's secret is printed once (its last line); ``--secret-stdin`` reads it from
the first line of stdin instead (Zendesk makes its own signing secret: paste that one).
"""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentweb.runs.errors import ActionError
from agentweb.tickets import actions, mailbox
from agentweb.tickets.models import Source


def _read_secret() -> str:
    line = sys.stdin.readline().strip()
    if len(line) < 16:
        raise CommandError("the secret from stdin must be at least 16 characters")
    return line


class Command(BaseCommand):
    help = "Manage ticket sources (webhooks from helpdesks): add-source, set-secret, sources."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add-source", help="a new webhook source; prints its secret once")
        add.add_argument("name")
        add.add_argument("--kind", choices=Source.Kind.values, default=Source.Kind.GENERIC)
        add.add_argument("--reply-url", default="", help="where replies are POSTed (signed)")
        add.add_argument("--secret-stdin", action="store_true", help="read the secret from stdin")
        secret = sub.add_parser("set-secret", help="a new secret for a source; printed once")
        secret.add_argument("name")
        secret.add_argument("--secret-stdin", action="store_true")
        sub.add_parser("sources", help="list the sources (secrets not shown)")
        remove = sub.add_parser("remove-source", help="delete a source (its tickets stay)")
        remove.add_argument("name")
        sub.add_parser("poll", help="read the mailbox AGENTWEB_IMAP_URL names now")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            getattr(self, "_" + opts["action"].replace("-", "_"))(opts)
        except ActionError as exc:
            raise CommandError(exc.message) from None

    def _hook_url(self, name: str) -> str:
        site = (getattr(settings, "AGENTWEB_SITE_URL", "") or "").rstrip("/")
        return f"{site}/hooks/tickets/{name}" if site else f"/hooks/tickets/{name}"

    def _add_source(self, opts: dict[str, Any]) -> None:
        given = _read_secret() if opts["secret_stdin"] else None
        source, secret = actions.do_add_source(
            opts["name"], kind=opts["kind"], reply_url=opts["reply_url"], secret=given
        )
        self.stdout.write(
            f"source {source.name} ({source.kind}): POST to {self._hook_url(source.name)}"
        )
        if source.reply_url:
            self.stdout.write(f"replies go to {source.reply_url}")
        self.stdout.write("secret (shown once):")
        self.stdout.write(secret)

    def _set_secret(self, opts: dict[str, Any]) -> None:
        given = _read_secret() if opts["secret_stdin"] else None
        secret = actions.do_set_secret(opts["name"], given)
        self.stdout.write(f"new secret of {opts['name']} (shown once):")
        self.stdout.write(secret)

    def _sources(self, opts: dict[str, Any]) -> None:
        for source in Source.objects.all():
            state = "" if source.enabled else " (disabled)"
            reply = f" replies to {source.reply_url}" if source.reply_url else ""
            self.stdout.write(
                f"{source.name}\t{source.kind}{state}\t{self._hook_url(source.name)}{reply}"
            )

    def _remove_source(self, opts: dict[str, Any]) -> None:
        deleted, _ = Source.objects.filter(name=opts["name"]).delete()
        if not deleted:
            raise CommandError(f"no source named {opts['name']!r}")
        self.stdout.write(f"removed source {opts['name']}")

    def _poll(self, opts: dict[str, Any]) -> None:
        config = settings.AGENTWEB_IMAP
        if config is None:
            raise CommandError("AGENTWEB_IMAP_URL is not set: there is no mailbox to read")
        result = mailbox.poll_now(config)
        if not result.polled:
            self.stdout.write(f"{config.describe()}: another poll holds the mailbox; try later")
        elif result.error:
            raise CommandError(f"{config.describe()}: {result.error}")
        else:
            self.stdout.write(
                f"{config.describe()}: {result.imported} imported, {result.skipped} skipped"
            )
