"""Configuration of the approval channels, read once at start (``settings.py``); a bad
value stops start-up naming the variable. Django-free but for ``ImproperlyConfigured``."""

from __future__ import annotations

import re

from django.core.exceptions import ImproperlyConfigured

from agentweb.outbox.config import check_http_url

_SLACK_ID = re.compile(r"[UW][A-Z0-9]{2,20}")


def parse_slack_users(value: str, name: str = "AGENTWEB_SLACK_USERS") -> dict[str, str]:
    """``U0123=alice,U0456=bob`` → {Slack user id: agentweb user name}."""
    users: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in (value or "").split(","))):
        slack_id, sep, username = (x.strip() for x in item.partition("="))
        if not sep or not _SLACK_ID.fullmatch(slack_id) or not username:
            raise ImproperlyConfigured(
                f"{name} entries look like 'U0123ABC=alice' (a Slack user id, '=', a user "
                f"name), got {item!r}"
            )
        if slack_id in users:
            raise ImproperlyConfigured(f"{name} names {slack_id} twice")
        users[slack_id] = username
    return users


def is_slack_id(value: str) -> bool:
    return bool(_SLACK_ID.fullmatch(value or ""))


def parse_webhooks(value: str, name: str = "AGENTWEB_WEBHOOKS") -> list[str]:
    urls = [u.strip() for u in (value or "").split(",") if u.strip()]
    for url in urls:
        check_http_url(url, name)
    if len(set(urls)) != len(urls):
        raise ImproperlyConfigured(f"{name} names a URL twice")
    return urls


def check_site_url_for_links(site_url: str, smtp_on: bool, slack_url: str) -> None:
    """Links in mails and Slack messages must be absolute."""
    if site_url:
        return
    which = "AGENTWEB_SMTP_URL" if smtp_on else "AGENTWEB_SLACK_WEBHOOK_URL"
    if smtp_on or slack_url:
        raise ImproperlyConfigured(
            f"AGENTWEB_SITE_URL must be set when {which} is: approval mails and Slack "
            "messages link to https://<your agentweb>/approvals/<id>/"
        )
