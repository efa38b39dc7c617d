"""Every write to the MCP servers' rows: adding and removing a server (with its checks,
``check_server``), and recording what a contact with it found (``do_record_status``).

The API, the admin and ``manage.py mcp`` parse their input, call these, and render."""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentweb.mcpservers.models import McpServer
from agentweb.mcpservers.source import SOURCE
from agentweb.runs import queue
from agentweb.runs.errors import ActionError, Conflict, NotAllowed
from agentweb.runs.store import audit
from agentweb.runtime.mcpserver import ServerConfig, ServerStatus, server_name_problem

log = logging.getLogger(__name__)

MAX_PAIRS = 50
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: Headers the MCP transport sets itself.
RESERVED_HEADERS = {
    "accept",
    "content-type",
    "content-length",
    "host",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
}


class ServerInvalid(ActionError):
    """A server entry that cannot work; ``details`` names each field and why."""

    code, status = "invalid_server", 422

    def __init__(self, errors: dict[str, str]) -> None:
        fields = "; ".join(f"{k}: {v}" for k, v in errors.items())
        super().__init__(f"invalid fields: {fields}", details=errors)
        self.errors = errors


def may_manage(user: Any) -> bool:
    """Admins manage MCP servers: a server's tools reach the agents and its command runs
    on the workers (the admin role's own permission, the one that changes profiles)."""
    return bool(user.is_superuser or user.has_perm("runs.change_agentprofile"))


def check_may_manage(user: Any) -> None:
    if not may_manage(user):
        raise NotAllowed("only admins may see and change MCP servers")


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``["K=V", ...]`` (``--env``, one pair each) as a mapping; raises ``ServerInvalid``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ServerInvalid({"env": f"{_shown(pair)!r} is not NAME=VALUE"})
        out[key.strip()] = value
    return out


def parse_headers(pairs: list[str]) -> dict[str, str]:
    """``["Name: value", ...]`` (``--header``, one pair each) as a mapping."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition(":")
        if not sep:
            raise ServerInvalid({"headers": f"{_shown(pair)!r} is not 'Name: value'"})
        out[key.strip()] = value.strip()
    return out


def _shown(pair: str) -> str:
    """A pair as an error may show it: its name only (the value may be a secret)."""
    return pair.split("=", 1)[0].split(":", 1)[0][:40]


def check_server(
    name: str, command: str, url: str, env: Mapping[str, Any], headers: Mapping[str, Any]
) -> dict[str, str]:
    """What is wrong with a server entry, by field."""
    errors: dict[str, str] = {}
    problem = server_name_problem(name)
    if problem:
        errors["name"] = problem
    if bool(command.strip()) == bool(url.strip()):
        errors["command"] = "give a command (stdio) or a url (Streamable HTTP), not both"
    if command.strip():
        try:
            parts = shlex.split(command)
        except ValueError as exc:
            errors["command"] = f"cannot be split into arguments: {exc}"
        else:
            if "\x00" in command or len(command) > 4000:
                errors["command"] = "at most 4,000 characters, no NUL"
            elif not parts:
                errors["command"] = "is empty"
        if headers:
            errors["headers"] = "only a server reached by url takes headers"
    if url.strip():
        scheme, sep, rest = url.partition("://")
        if scheme.lower() not in ("http", "https") or not sep or not rest.split("/")[0]:
            errors["url"] = "must be an http:// or https:// URL with a host"
        elif len(url) > 2000 or any(c in url for c in "\x00\r\n \t"):
            errors["url"] = "at most 2,000 characters, no spaces or control characters"
        if env:
            errors["env"] = "only a server started by a command takes env"
    for field, pairs, pattern in (("env", env, _ENV_NAME), ("headers", headers, _HEADER_NAME)):
        if field in errors:
            continue
        if len(pairs) > MAX_PAIRS:
            errors[field] = f"at most {MAX_PAIRS} entries"
            continue
        for key, value in pairs.items():
            if not isinstance(key, str) or not pattern.fullmatch(key):
                errors[field] = f"{str(key)[:40]!r} is not a valid name"
            elif not isinstance(value, str):
                errors[field] = f"the value of {key} must be a string"
            elif (
                "\x00" in value
                or len(value) > 8000
                or (field == "headers" and ("\r" in value or "\n" in value))
            ):
                errors[field] = f"the value of {key} is too long or has control characters"
            elif field == "headers" and key.lower() in RESERVED_HEADERS:
                errors[field] = f"{key} is set by the MCP transport itself"
            else:
                continue
            break
    return errors


def do_add_server(
    *,
    name: str,
    command: str = "",
    url: str = "",
    env: Mapping[str, Any] | None = None,
    headers: Mapping[str, Any] | None = None,
    actor: Any = None,
) -> McpServer:
    """Add a server; the workers contact it within seconds (a refresh task is sent after
    commit, and each worker reads new rows every few seconds)."""
    name, command, url = name.strip(), command.strip(), url.strip()
    env, headers = dict(env or {}), dict(headers or {})
    errors = check_server(name, command, url, env, headers)
    if errors:
        raise ServerInvalid(errors)
    with transaction.atomic():
        if McpServer.objects.select_for_update().filter(name=name).exists():
            raise Conflict(f"an MCP server named {name!r} exists; remove it first")
        server = McpServer.objects.create(
            name=name,
            transport=McpServer.Transport.STDIO if command else McpServer.Transport.HTTP,
            command=command,
            url=url,
            env=env,
            headers=headers,
        )
        audit(
            "mcp_server_added",
            actor=actor,
            run=None,
            server=name,
            transport=server.transport,
            target=command or server.as_json()["url"],
            env=sorted(env),
            headers=sorted(headers),
        )
        transaction.on_commit(lambda: ask_for_contact(name))
    SOURCE.invalidate()
    return server


def do_change_server(
    server: McpServer,
    *,
    command: str,
    url: str,
    env: Mapping[str, Any] | None = None,
    headers: Mapping[str, Any] | None = None,
    actor: Any = None,
) -> McpServer:
    """Change how a server is reached (``env``/``headers`` None: keep the stored ones).
    Every process drops its connection made the old way; the new way is contacted soon."""
    command, url = command.strip(), url.strip()
    env = dict(server.env or {}) if env is None else dict(env)
    headers = dict(server.headers or {}) if headers is None else dict(headers)
    if command:
        headers = {}
    else:
        env = {}
    errors = check_server(server.name, command, url, env, headers)
    if errors:
        raise ServerInvalid(errors)
    with transaction.atomic():
        server.transport = McpServer.Transport.STDIO if command else McpServer.Transport.HTTP
        server.command, server.url, server.env, server.headers = command, url, env, headers
        server.state, server.error = McpServer.State.NEW, ""
        server.save()
        audit(
            "mcp_server_changed",
            actor=actor,
            run=None,
            server=server.name,
            transport=server.transport,
            target=command or server.as_json()["url"],
            env=sorted(env),
            headers=sorted(headers),
        )
        transaction.on_commit(lambda: ask_for_contact(server.name))
    SOURCE.invalidate()
    return server


def do_remove_server(server: McpServer, *, actor: Any = None) -> None:
    """Remove a server: its tools leave every process within seconds; profiles that name
    them keep the names (they are offered no more)."""
    with transaction.atomic():
        audit("mcp_server_removed", actor=actor, run=None, server=server.name)
        server.delete()
    SOURCE.invalidate()


def do_record_status(config: ServerConfig, status: ServerStatus) -> None:
    """What a contact with a server found (a listing, a failure), when it is about the
    server's current entry; the row is written only when something changed."""
    server = McpServer.objects.filter(name=config.name).first()
    if server is None or server.config() != config:
        return  # removed, or changed since this connection was made
    update: dict[str, Any] = {"checked_at": timezone.now()}
    if status.state == "ready":
        update.update(state=McpServer.State.READY, error="")
        if status.tools is not None:
            update["tools"] = [t.to_json() for t in status.tools]
    else:
        update.update(state=McpServer.State.FAILED, error=status.error[:2000])
    changed = any(getattr(server, k) != v for k, v in update.items() if k != "checked_at")
    if not changed:
        McpServer.objects.filter(pk=server.pk).update(checked_at=update["checked_at"])
        return
    update["updated_at"] = update["checked_at"]
    McpServer.objects.filter(pk=server.pk).update(**update)
    SOURCE.invalidate()
    if status.state != "ready":
        log.warning("MCP server %s: %s", config.name, status.error)


def refresh(server: McpServer, *, close: bool = False) -> McpServer:
    """Contact the server from this process now: list its tools and record what happened.
    ``close``: then close every connection this process holds (a command's stdio servers
    stop with it)."""
    # Imported here: the MCP SDK takes most of a second to import; only a process that
    # contacts a server (a worker, `manage.py mcp`) loads it.
    from agentweb.runtime import mcpclient

    try:
        config = server.config()
        try:
            infos = mcpclient.connection(config).list_tools()
        except mcpclient.McpFault as exc:
            do_record_status(config, ServerStatus("failed", str(exc)))
        else:
            do_record_status(config, ServerStatus("ready", "", tuple(infos)))
        server.refresh_from_db()
        return server
    finally:
        if close:
            mcpclient.close_all()


#: The task that contacts a server (``agentweb.mcpservers.tasks.refresh_server``), sent
#: by name: the tasks import these actions.
REFRESH_SERVER = "agentweb.mcpservers.tasks.refresh_server"


def ask_for_contact(name: str) -> None:
    """Ask a worker to contact the new server; a broker that is away only delays it (each
    worker also reads new servers by itself)."""
    try:
        queue.send(REFRESH_SERVER, name)
    except Exception as exc:
        log.warning("could not ask a worker to contact MCP server %s (%s)", name, exc)
