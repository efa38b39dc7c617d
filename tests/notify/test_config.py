"""Bad configuration of the approval channels stops start-up naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentweb.notify.config import parse_slack_users, parse_webhooks
from tests.conftest import ROOT


def test_slack_users_are_read() -> None:
    assert parse_slack_users("U0123=alice, W0456ABC = bob") == {"U0123": "alice", "W0456ABC": "bob"}
    assert parse_slack_users("") == {}


@pytest.mark.parametrize("value", ["alice", "U0123=", "u0123=alice", "U0123=a,U0123=b"])
def test_bad_slack_users_are_refused(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="AGENTWEB_SLACK_USERS"):
        parse_slack_users(value)


def test_webhooks_are_urls() -> None:
    assert parse_webhooks("https://a.example/x, http://127.0.0.1:9/y") == [
        "https://a.example/x", "http://127.0.0.1:9/y",
    ]  # fmt: skip
    for bad in ("ftp://a.example", "https://a.example/x,https://a.example/x", "not a url"):
        with pytest.raises(ImproperlyConfigured, match="AGENTWEB_WEBHOOKS"):
            parse_webhooks(bad)


@pytest.mark.parametrize(
    "extra, named",
    [
        ({"AGENTWEB_SMTP_URL": "smtp://127.0.0.1:25?tls=off"}, "AGENTWEB_SITE_URL"),
        (
            {"AGENTWEB_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/X"},
            "AGENTWEB_SLACK_SIGNING_SECRET",
        ),
        ({"AGENTWEB_SLACK_USERS": "alice"}, "AGENTWEB_SLACK_USERS"),
        ({"AGENTWEB_WEBHOOKS": "hooks.example.com"}, "AGENTWEB_WEBHOOKS"),
        ({"AGENTWEB_ESCALATE_AFTER_MINUTES": "30"}, "AGENTWEB_ESCALATION_GROUP"),
        ({"AGENTWEB_ESCALATE_AFTER_MINUTES": "soon"}, "AGENTWEB_ESCALATE_AFTER_MINUTES"),
        ({"AGENTWEB_APPROVAL_REMIND_MINUTES": "-1"}, "AGENTWEB_APPROVAL_REMIND_MINUTES"),
        ({"AGENTWEB_APPROVAL_TTL_HOURS": "0"}, "AGENTWEB_APPROVAL_TTL_HOURS"),
    ],
)
def test_a_process_with_bad_configuration_stops_naming_it(
    extra: dict[str, str], named: str
) -> None:
    env = {**os.environ, "DEBUG": "1", "AGENTWEB_MAIL_FROM": "a@example.com", **extra}
    # Empty rather than absent: manage.py fills what is absent from a `make run` of this
    # checkout that is up (var/devstack.env), whose AGENTWEB_SITE_URL is set.
    env["AGENTWEB_SITE_URL"] = ""
    env.setdefault("DATABASE_URL", "postgresql://x@127.0.0.1/x")
    env.setdefault("REDIS_URL", "redis://127.0.0.1:1/0")
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert named in done.stderr.splitlines()[-1]


def test_decimal_minutes_and_hours_are_accepted() -> None:
    env = {
        **os.environ, "DEBUG": "1", "AGENTWEB_APPROVAL_TTL_HOURS": "0.01",
        "AGENTWEB_ESCALATE_AFTER_MINUTES": "0.05", "AGENTWEB_ESCALATION_GROUP": "leads",
        "AGENTWEB_APPROVAL_REMIND_MINUTES": "0.2",
    }  # fmt: skip
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.AGENTWEB_APPROVAL_TTL_HOURS, s.AGENTWEB_ESCALATE_AFTER_MINUTES, "
        "s.AGENTWEB_APPROVAL_REMIND_MINUTES)"
    )
    env["DJANGO_SETTINGS_MODULE"] = "agentweb.settings"
    env.setdefault("DATABASE_URL", "postgresql://x@127.0.0.1/x")
    env.setdefault("REDIS_URL", "redis://127.0.0.1:1/0")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.stdout.split() == ["0.01", "0.05", "0.2"], done.stderr
