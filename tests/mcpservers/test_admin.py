"""MCP servers in /admin/: added and changed through the same checks; secrets write-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agentweb.mcpservers.models import McpServer

SECRET = "admin-typed-secret-77"


@pytest.fixture
def admin_client(people: dict[str, Any]) -> Client:
    boss = get_user_model().objects.create_superuser("boss", password="pw-123456789")
    client = Client()
    client.force_login(boss)
    return client


def test_an_admin_adds_a_server_and_its_secrets_are_never_shown(
    admin_client: Client, asked: list[str]
) -> None:
    added = admin_client.post(
        "/admin/mcpservers/mcpserver/add/",
        {"name": "crm", "command": "crm-mcp --stdio", "url": "", "env_lines": f"TOKEN={SECRET}"},
    )
    assert added.status_code == 302, added.content.decode()[-2000:]
    server = McpServer.objects.get(name="crm")
    assert server.env == {"TOKEN": SECRET} and asked == ["crm"]
    page = admin_client.get(f"/admin/mcpservers/mcpserver/{server.pk}/change/")
    text = page.content.decode()
    assert page.status_code == 200 and "env TOKEN" in text and SECRET not in text
    listing = admin_client.get("/admin/mcpservers/mcpserver/").content.decode()
    assert "crm-mcp --stdio" in listing and SECRET not in listing
    # A change that leaves the secrets empty keeps them.
    changed = admin_client.post(
        f"/admin/mcpservers/mcpserver/{server.pk}/change/",
        {"command": "crm-mcp --stdio --verbose", "url": "", "env_lines": ""},
    )
    assert changed.status_code == 302
    server.refresh_from_db()
    assert server.command == "crm-mcp --stdio --verbose" and server.env == {"TOKEN": SECRET}


def test_the_admin_refuses_what_cannot_work(admin_client: Client) -> None:
    refused = admin_client.post(
        "/admin/mcpservers/mcpserver/add/",
        {"name": "web", "command": "", "url": "https://web.example/mcp", "env_lines": "A=1"},
    )
    assert refused.status_code == 200
    assert "only a server started by a command takes env" in refused.content.decode()
    assert McpServer.objects.count() == 0


def test_the_admin_page_is_for_admins_only(people: dict[str, Any]) -> None:
    operator = people["operator"]
    operator.is_staff = True
    operator.save()
    client = Client()
    client.force_login(operator)
    assert client.get("/admin/mcpservers/mcpserver/").status_code == 403
