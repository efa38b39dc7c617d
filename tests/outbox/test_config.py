"""Bad outbox configuration stops start-up with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentweb.env import env_float
from agentweb.outbox.config import parse_mail_from, parse_site_url, parse_smtp_url
from tests.conftest import ROOT


def test_it_reads_the_three_forms_of_smtp_url() -> None:
    starttls = parse_smtp_url("smtp://user%40x:p%3Ass@mail.example.com:587")
    assert starttls is not None
    assert (starttls.host, starttls.port, starttls.implicit_tls, starttls.tls) == (
        "mail.example.com", 587, False, True,
    )  # fmt: skip
    assert (starttls.username, starttls.password) == ("user@x", "p:ss")
    assert "p:ss" not in starttls.describe()
    tls = parse_smtp_url("smtps://u:p@mail.example.com")
    assert tls is not None and (tls.port, tls.implicit_tls) == (465, True)
    plain = parse_smtp_url("smtp://127.0.0.1:2525?tls=off")
    assert plain is not None and plain.tls is False
    assert parse_smtp_url("") is None


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://mail.example.com", "smtps:// or smtp://"),
        ("smtp://", "must name a host"),
        ("smtp://mail.example.com:99999", "invalid port"),
        ("smtp://mail.example.com?tls=off", "loopback"),
        ("smtps://127.0.0.1?tls=off", "TLS from the start"),
        ("smtp://127.0.0.1?starttls=no", "unknown option"),
        ("smtp://127.0.0.1?tls=maybe", "tls must be 'off'"),
    ],
)
def test_it_refuses_a_bad_smtp_url(url: str, words: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="AGENTWEB_SMTP_URL") as info:
        parse_smtp_url(url)
    assert words in str(info.value)


def test_mail_from_is_required_with_mail_and_must_be_an_address() -> None:
    smtp = parse_smtp_url("smtp://127.0.0.1:25?tls=off")
    with pytest.raises(ImproperlyConfigured, match="AGENTWEB_MAIL_FROM must be set"):
        parse_mail_from("", smtp)
    with pytest.raises(ImproperlyConfigured, match="AGENTWEB_MAIL_FROM must be an email"):
        parse_mail_from("support", smtp)
    assert parse_mail_from("Support <help@example.com>", smtp) == "Support <help@example.com>"


def test_site_url_must_be_absolute() -> None:
    assert parse_site_url("https://aw.example.com/") == "https://aw.example.com"
    with pytest.raises(ImproperlyConfigured, match="AGENTWEB_SITE_URL"):
        parse_site_url("aw.example.com")


def test_decimals_are_accepted_and_nonsense_is_not() -> None:
    assert env_float("X", 1, env={"X": "0.05"}) == 0.05
    for bad in ("nan", "inf", "abc"):
        with pytest.raises(ImproperlyConfigured, match="X must be a"):
            env_float("X", 1, env={"X": bad})
    with pytest.raises(ImproperlyConfigured, match="X must be more than 0"):
        env_float("X", 1, env={"X": "0"}, above=0)


@pytest.mark.parametrize(
    "name, value",
    [
        ("AGENTWEB_SMTP_URL", "smtp://mail.example.com?tls=off"),
        ("AGENTWEB_DELIVERY_TIMEOUT_SECONDS", "soon"),
        ("AGENTWEB_SITE_URL", "example.com"),
    ],
)
def test_a_process_with_bad_configuration_stops_naming_it(name: str, value: str) -> None:
    env = {**os.environ, "DEBUG": "1", name: value, "AGENTWEB_MAIL_FROM": "a@example.com"}
    env.setdefault("DATABASE_URL", "postgresql://x@127.0.0.1/x")
    env.setdefault("REDIS_URL", "redis://127.0.0.1:1/0")
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert name in done.stderr.splitlines()[-1]
