from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentweb.accounts.models import ApiToken


class Command(BaseCommand):
    help = "Issue an API bearer token for USERNAME; the token is the last line printed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")

    def handle(self, *args: object, **opts: str) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(username=opts["username"])
        except User.DoesNotExist:
            raise CommandError(f"no user named {opts['username']!r}") from None
        raw = ApiToken.issue(user, name=opts["name"])
        self.stderr.write(f"API token for {user.get_username()} (shown once):")
        self.stdout.write(raw)
