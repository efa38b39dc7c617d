"""The outbox's configuration, read once at start (``settings.py``): a bad value stops
start-up with a message naming the variable.

Imports nothing of Django but its ``ImproperlyConfigured``, so settings can use it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from email.utils import parseaddr
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class SmtpConfig:
    """Where mail goes. ``implicit_tls``: TLS from the first byte (``smtps://``);
    otherwise STARTTLS when the server offers it, unless ``tls`` is off (loopback only)."""

    host: str
    port: int
    implicit_tls: bool
    tls: bool
    username: str
    password: str

    def describe(self) -> str:
        """For logs and pages: no password."""
        scheme = "smtps" if self.implicit_tls else "smtp"
        user = f"{self.username}@" if self.username else ""
        return f"{scheme}://{user}{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ServerUrl:
    """A mail server's address read from ``<scheme>://user:pass@host:port/path?tls=off``."""

    host: str
    port: int | None
    implicit_tls: bool
    tls: bool
    username: str | None
    password: str | None
    path: str


def parse_server_url(
    value: str, name: str, *, plain: str, implicit: str, example: str, in_clear: str
) -> ServerUrl:
    """The part SMTP and IMAP addresses share: ``<implicit>://`` is TLS from the first byte,
    ``<plain>://`` STARTTLS, ``?tls=off`` plain text for a loopback host only (tests);
    ``in_clear`` says what would travel unencrypted. User and password stay percent-encoded."""
    parts = urlsplit(value)
    if parts.scheme not in {plain, implicit}:
        raise ImproperlyConfigured(
            f"{name} must start with {implicit}:// or {plain}://, got scheme {parts.scheme!r}"
        )
    host = parts.hostname or ""
    if not host:
        raise ImproperlyConfigured(f"{name} must name a host: {example}")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name} has an invalid port") from None
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"tls"})
    if unknown:
        raise ImproperlyConfigured(f"{name}: unknown option {unknown[0]!r} (only ?tls=off)")
    tls_option = query.get("tls", ["on"])[-1].lower()
    if tls_option not in {"on", "off"}:
        raise ImproperlyConfigured(f"{name}: tls must be 'off' (or left out), got {tls_option!r}")
    is_implicit = parts.scheme == implicit
    tls = tls_option == "on"
    if not tls:
        if is_implicit:
            raise ImproperlyConfigured(
                f"{name}: {implicit}:// is TLS from the start; tls=off is for {plain}://"
            )
        if not is_loopback(host):
            raise ImproperlyConfigured(
                f"{name}: tls=off sends {in_clear} in clear and is refused for {host!r}; "
                "it is for a test server on a loopback address only"
            )
    return ServerUrl(
        host=host,
        port=port,
        implicit_tls=is_implicit,
        tls=tls,
        username=parts.username,
        password=parts.password,
        path=parts.path,
    )


def parse_smtp_url(value: str, name: str = "AGENTWEB_SMTP_URL") -> SmtpConfig | None:
    """``smtp://user:pass@host:587`` (STARTTLS when offered), ``smtps://user:pass@host:465``
    (TLS from the start), ``smtp://host:2525?tls=off`` (plain text, loopback hosts only:
    tests). Empty: no mail. User and password are percent-decoded."""
    value = (value or "").strip()
    if not value:
        return None
    url = parse_server_url(
        value,
        name,
        plain="smtp",
        implicit="smtps",
        example="smtp://user:pass@host:587",
        in_clear="mail and passwords",
    )
    return SmtpConfig(
        host=url.host,
        port=url.port or (465 if url.implicit_tls else 25),
        implicit_tls=url.implicit_tls,
        tls=url.tls,
        username=unquote(url.username or ""),
        password=unquote(url.password or ""),
    )


def parse_mail_from(value: str, smtp: SmtpConfig | None, name: str = "AGENTWEB_MAIL_FROM") -> str:
    """The ``From:`` of every mail: ``agentweb@example.com`` or ``Support <help@x.com>``.
    Required once mail is on."""
    value = (value or "").strip()
    if not value:
        if smtp is not None:
            raise ImproperlyConfigured(
                f"{name} must be set when AGENTWEB_SMTP_URL is: the From: address of every "
                "mail, e.g. 'Support <support@example.com>'"
            )
        return "agentweb@localhost"
    if "\n" in value or "\r" in value:
        raise ImproperlyConfigured(f"{name} must be one line")
    _, address = parseaddr(value)
    local, _, domain = address.rpartition("@")
    if not local or not domain or " " in address:
        raise ImproperlyConfigured(
            f"{name} must be an email address ('support@example.com' or "
            f"'Support <support@example.com>'), got {value!r}"
        )
    return value


def parse_site_url(value: str, name: str = "AGENTWEB_SITE_URL") -> str:
    """The absolute address links in mails and Slack messages start with (no trailing /)."""
    value = (value or "").strip().rstrip("/")
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ImproperlyConfigured(
            f"{name} must be an absolute http(s) address like https://agentweb.example.com, "
            f"got {value!r}"
        )
    if parts.query or parts.fragment:
        raise ImproperlyConfigured(f"{name} must not have a query or fragment")
    return value


def check_http_url(value: str, name: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ImproperlyConfigured(f"{name}: {value!r} is not an http(s) URL")
    try:
        parts.port  # noqa: B018 - raises for a bad port
    except ValueError:
        raise ImproperlyConfigured(f"{name}: {value!r} has an invalid port") from None
    return value
