"""The tickets' configuration, read once at start (``settings.py``): a bad value stops
start-up with a message naming the variable. Imports nothing of Django but
``ImproperlyConfigured``, so settings can use it.

- ``AGENTWEB_IMAP_URL``: ``imaps://user:pass@host:993/INBOX`` (TLS from the start) or
  ``imap://user:pass@host:143/INBOX`` (STARTTLS; a server that does not offer it is not
  sent the password), ``?tls=off`` for a test server on a loopback address only.
- ``AGENTWEB_INTAKE_RULES``: a JSON list of ``{"queue"?, "tag"?, "agent", "mode":
  "auto"|"suggest"}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from django.core.exceptions import ImproperlyConfigured

from agentweb.outbox.config import parse_server_url


@dataclass(frozen=True, slots=True)
class ImapConfig:
    host: str
    port: int
    implicit_tls: bool
    tls: bool
    username: str
    password: str
    folder: str

    @property
    def key(self) -> str:
        """Which mailbox this is (its import state is kept under this name): no password."""
        return f"{self.username}@{self.host}:{self.port}/{self.folder}"

    def describe(self) -> str:
        scheme = "imaps" if self.implicit_tls else "imap"
        return f"{scheme}://{self.key}"


def parse_imap_url(value: str, name: str = "AGENTWEB_IMAP_URL") -> ImapConfig | None:
    value = (value or "").strip()
    if not value:
        return None
    url = parse_server_url(
        value,
        name,
        plain="imap",
        implicit="imaps",
        example="imaps://user:pass@host:993/INBOX",
        in_clear="the password",
    )
    if not url.username or url.password is None:
        raise ImproperlyConfigured(f"{name} must carry the user and password: imaps://user:pass@…")
    folder = unquote(url.path.lstrip("/")) or "INBOX"
    if any(c in folder for c in "\r\n\x00"):
        raise ImproperlyConfigured(f"{name}: the folder name has a line break or NUL")
    return ImapConfig(
        host=url.host,
        port=url.port or (993 if url.implicit_tls else 143),
        implicit_tls=url.implicit_tls,
        tls=url.tls,
        username=unquote(url.username),
        password=unquote(url.password),
        folder=folder,
    )


@dataclass(frozen=True, slots=True)
class IntakeRule:
    agent: str
    mode: str  # "auto" | "suggest"
    queue: str = ""
    tag: str = ""

    def matches(self, queue: str, tags: list[str]) -> bool:
        if self.queue and self.queue != queue:
            return False
        return not self.tag or self.tag in tags

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"agent": self.agent, "mode": self.mode}
        if self.queue:
            out["queue"] = self.queue
        if self.tag:
            out["tag"] = self.tag
        return out


def parse_rule(item: Any, where: str) -> IntakeRule:
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be an object")
    unknown = sorted(set(item) - {"queue", "tag", "agent", "mode"})
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (queue, tag, agent, mode)")
    agent, mode = item.get("agent"), item.get("mode")
    if not isinstance(agent, str) or not agent.strip():
        raise ValueError(f"{where}.agent must name an agent profile")
    if mode not in ("auto", "suggest"):
        raise ValueError(f'{where}.mode must be "auto" or "suggest"')
    queue, tag = item.get("queue", ""), item.get("tag", "")
    if not isinstance(queue, str) or not isinstance(tag, str):
        raise ValueError(f"{where}: queue and tag must be strings")
    return IntakeRule(agent=agent.strip(), mode=mode, queue=queue.strip(), tag=tag.strip())


def parse_intake_rules(value: str, name: str = "AGENTWEB_INTAKE_RULES") -> tuple[IntakeRule, ...]:
    value = (value or "").strip()
    if not value:
        return ()
    try:
        data = json.loads(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ImproperlyConfigured(f'{name} must be a JSON list of {{"agent", "mode", ...}}')
    try:
        return tuple(parse_rule(item, f"{name}[{n}]") for n, item in enumerate(data))
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None
