"""``manage.py mcp``: the MCP servers whose tools the agents may use (DESIGN §13).

    mcp add NAME --command "CMD ARGS" [--env K=V ...]     a server started as a command (stdio)
    mcp add NAME --url URL [--header "K: V" ...]         a server over Streamable HTTP
    mcp list [--check] [--json]                           each server's state and tools
    mcp remove NAME

``add`` contacts the server from this command at once and prints its tools (or why it
could not), and asks a worker to contact it too; the running stack offers its tools
within seconds, without a restart. Env and header values are stored and never printed.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentweb.mcpservers import actions
from agentweb.mcpservers.models import McpServer
from agentweb.runs.errors import ActionError
from agentweb.runtime.mcptools import risk_of, tool_name


class Command(BaseCommand):
    help = "Add, list and remove the MCP servers whose tools agents may use."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="add a server: --command (stdio) or --url (HTTP)")
        add.add_argument("name")
        how = add.add_mutually_exclusive_group(required=True)
        how.add_argument("--command", help='the command and its arguments, "CMD ARGS"')
        how.add_argument("--url", help="the Streamable HTTP endpoint")
        add.add_argument(
            "--env", action="append", default=[], metavar="K=V", help="one variable (repeat)"
        )
        add.add_argument(
            "--header", action="append", default=[], metavar="K: V", help="one header (repeat)"
        )
        add.add_argument(
            "--no-contact", action="store_true", help="do not contact it from this command"
        )
        listing = sub.add_parser("list", help="each server's state and tools")
        listing.add_argument("--check", action="store_true", help="contact each one now")
        listing.add_argument("--json", action="store_true", help="print the API's JSON")
        remove = sub.add_parser("remove", help="remove a server")
        remove.add_argument("name")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            getattr(self, f"_{opts['action']}")(opts)
        except ActionError as exc:
            raise CommandError(exc.message) from None

    def _add(self, opts: dict[str, Any]) -> None:
        server = actions.do_add_server(
            name=opts["name"],
            command=opts["command"] or "",
            url=opts["url"] or "",
            env=actions.parse_env(opts["env"]),
            headers=actions.parse_headers(opts["header"]),
        )
        self.stdout.write(f"added MCP server {server.name} ({server.transport})")
        if not opts["no_contact"]:
            server = self._contact(server)
            self._show(server)
            if server.state == McpServer.State.FAILED:
                self.stderr.write(
                    "it is stored: the workers try again (at start, and for each call)"
                )

    def _list(self, opts: dict[str, Any]) -> None:
        servers = list(McpServer.objects.all())
        if opts["check"]:
            servers = [self._contact(s) for s in servers]
        if opts["json"]:
            data = {"servers": [s.as_json() for s in servers]}
            self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False))
            return
        if not servers:
            self.stdout.write("no MCP servers (add one: manage.py mcp add NAME --command ...)")
        for server in servers:
            self._show(server)

    def _remove(self, opts: dict[str, Any]) -> None:
        server = McpServer.objects.filter(name=opts["name"]).first()
        if server is None:
            raise CommandError(f"no MCP server named {opts['name']!r}")
        actions.do_remove_server(server)
        self.stdout.write(f"removed MCP server {server.name}")

    def _contact(self, server: McpServer) -> McpServer:
        # The MCP SDK is imported by the contact alone (the other subcommands do without
        # it); a stdio server started here stops with the command.
        return actions.refresh(server, close=True)

    def _show(self, server: McpServer) -> None:
        data = server.as_json()
        target = data.get("command") or data.get("url")
        checked = server.checked_at.strftime("%Y-%m-%d %H:%M:%S UTC") if server.checked_at else ""
        self.stdout.write(
            f"{server.name}  {server.transport}  {target}  {server.state}"
            + (f" (checked {checked})" if checked else "")
        )
        if server.error:
            self.stdout.write(f"  error: {server.error}")
        secrets = [*(f"env {k}" for k in data.get("env", []))]
        secrets += [f"header {k}" for k in data.get("headers", [])]
        if secrets:
            self.stdout.write(f"  secrets (values not shown): {', '.join(secrets)}")
        infos = server.tool_infos()
        if infos:
            shown = ", ".join(
                f"{tool_name(server.name, t.name)} ({risk_of(t.annotations)})" for t in infos
            )
            self.stdout.write(f"  tools: {shown}")
        elif server.state != McpServer.State.FAILED:
            self.stdout.write("  tools: none listed yet")
