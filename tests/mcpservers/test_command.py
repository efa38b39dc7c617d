"""``manage.py mcp add/list/remove`` against real servers (values of env and headers are
never printed)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agentweb.mcpservers.models import McpServer
from agentweb.runtime import mcpclient
from tests.fakes import mcp_servers

SECRET = "tok-5ecret-value"


def mcp(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("mcp", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_add_contacts_the_server_and_prints_its_tools(people: dict[str, Any]) -> None:
    out, _ = mcp(
        "add", "faulty", "--command", mcp_servers.faulty_command(), "--env", f"TOKEN={SECRET}"
    )
    assert out.startswith("added MCP server faulty (stdio)\nfaulty  stdio  ")
    assert "  ready (checked " in out
    assert "faulty__echo (low)" in out and "faulty__transfer (high)" in out
    assert "faulty__add_note (medium)" in out
    assert "secrets (values not shown): env TOKEN" in out and SECRET not in out
    assert mcpclient.live_processes() == []  # the server started here stopped with it
    listed, _ = mcp("list", "--json")
    [server] = json.loads(listed)["servers"]
    assert server["state"] == "ready" and "faulty__weather" in server["tools"]
    assert SECRET not in listed
    removed, _ = mcp("remove", "faulty")
    assert removed == "removed MCP server faulty\n"
    assert McpServer.objects.count() == 0


def test_a_server_over_http_with_headers(people: dict[str, Any]) -> None:
    with mcp_servers.http_server("everything") as url:
        out, _ = mcp("add", "ref", "--url", url, "--header", f"X-Api-Key: {SECRET}")
    assert "ref  http  " in out and "ref__get-sum (low)" in out
    assert "header X-Api-Key" in out and SECRET not in out
    stored = McpServer.objects.get(name="ref")
    assert stored.headers == {"X-Api-Key": SECRET}


def test_a_server_that_cannot_be_reached_is_stored_with_the_reason(people: dict[str, Any]):
    out, err = mcp("add", "gone", "--command", "/nonexistent/server --stdio")
    assert "gone  stdio  /nonexistent/server --stdio  failed" in out
    assert "error: MCP server 'gone' is unavailable: cannot start '/nonexistent/server'" in out
    assert "the workers try again" in err
    assert McpServer.objects.get(name="gone").state == "failed"
    checked, _ = mcp("list", "--check")
    assert "gone  stdio" in checked and "failed" in checked


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["add", "a__b", "--command", "x"], "name:"),
        (["add", "a", "--command", "x", "--env", "NOEQUALS"], "'NOEQUALS' is not NAME=VALUE"),
        (["add", "a", "--url", "https://a.example", "--header", "NoColon"], "is not 'Name: value'"),
        (["add", "a", "--url", "ftp://a"], "must be an http:// or https:// URL"),
        (["remove", "nobody"], "no MCP server named 'nobody'"),
    ],
)
def test_bad_input_is_refused_with_the_reason(
    people: dict[str, Any], args: list[str], words: str
) -> None:
    with pytest.raises(CommandError, match=words.replace("(", r"\(").replace("?", r"\?")):
        mcp(*args)
    assert McpServer.objects.count() == 0


def test_list_says_when_there_is_none(people: dict[str, Any]) -> None:
    out, _ = mcp("list")
    assert out.startswith("no MCP servers")
