import json
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentweb.runs import actions, engine
from agentweb.runs.event_text import text_of
from agentweb.runs.models import Run, RunEvent

# Exit codes say how the run ended (documented in the README).
EXIT = {
    Run.Status.SUCCEEDED: 0,
    Run.Status.FAILED: 1,
    Run.Status.WAITING_APPROVAL: 3,
    Run.Status.CANCELLED: 4,
}


def describe(event: RunEvent) -> str:
    return text_of(event.type, event.data).log


class Command(BaseCommand):
    help = (
        "Start a run through the same path as the web page and print its steps as they "
        "happen. Exit code: 0 succeeded, 1 failed, 3 waiting for approval, 4 cancelled, "
        "5 timed out waiting."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task")
        parser.add_argument("--agent", default=None)
        parser.add_argument("--user", default="operator")
        parser.add_argument("--ticket", type=int, default=None)
        parser.add_argument("--json", action="store_true", help="print events as JSON lines")
        parser.add_argument(
            "--inline",
            action="store_true",
            help="run in this process instead of waiting for a worker",
        )
        parser.add_argument("--timeout", type=float, default=600.0)

    def handle(self, *args: Any, **opts: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(username=opts["user"])
        except User.DoesNotExist:
            raise CommandError(f"no user named {opts['user']!r} (run seed_demo?)") from None
        try:
            run = actions.do_create_run(
                user=user, task=opts["task"], agent_name=opts["agent"], ticket_id=opts["ticket"]
            )
        except actions.ActionError as exc:
            raise CommandError(exc.message) from None
        if not opts["json"]:
            self.stderr.write(f"run {run.pk} started ({run.agent.name}, model {run.model})")
        if opts["inline"]:
            engine.execute_run(run.pk)
        seq, deadline = 0, time.monotonic() + opts["timeout"]
        while True:
            for event in RunEvent.objects.filter(run=run, seq__gt=seq).order_by("seq"):
                seq = event.seq
                if opts["json"]:
                    self.stdout.write(
                        json.dumps({"run": run.pk, **event.as_json()}, ensure_ascii=False)
                    )
                else:
                    self.stdout.write(f"[{event.seq:>3}] {describe(event)}")
            run.refresh_from_db(fields=["status", "last_seq"])
            if run.status not in (Run.Status.QUEUED, Run.Status.RUNNING) and seq >= run.last_seq:
                break
            if time.monotonic() > deadline:
                self.stderr.write(
                    f"gave up waiting after {opts['timeout']:.0f}s "
                    f"(status {run.status}; is a worker running?)"
                )
                raise SystemExit(5)
            time.sleep(0.05)
        if not opts["json"]:
            self.stderr.write(f"run {run.pk}: {run.status}")
        code = EXIT.get(Run.Status(run.status), 1)
        if code:
            raise SystemExit(code)
