"""``manage.py webhooks secret URL``: the secret a receiver checks our signature with (its
last line). ``manage.py webhooks list``: the configured URLs."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentweb.notify.actions import webhook_secret
from agentweb.outbox.config import check_http_url


class Command(BaseCommand):
    help = "Secrets of the webhooks in AGENTWEB_WEBHOOKS (approval and run events)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        secret = sub.add_parser("secret", help="print the signing secret of a webhook URL")
        secret.add_argument("url")
        sub.add_parser("list", help="the configured webhook URLs")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            for url in settings.AGENTWEB_WEBHOOKS:
                self.stdout.write(url)
            if not settings.AGENTWEB_WEBHOOKS:
                self.stderr.write("AGENTWEB_WEBHOOKS is empty: no webhooks are sent")
            return
        url = options["url"].strip()
        try:
            check_http_url(url, "URL")
        except Exception as exc:
            raise CommandError(str(exc)) from None
        if url not in settings.AGENTWEB_WEBHOOKS:
            self.stderr.write(
                f"note: {url} is not in AGENTWEB_WEBHOOKS; add it there to receive events"
            )
        self.stdout.write(
            "Receivers check X-Agentweb-Signature: sha256=<hex HMAC-SHA256 of "
            '"<X-Agentweb-Timestamp>.<raw body>"> with this secret:'
        )
        self.stdout.write(webhook_secret(url))
