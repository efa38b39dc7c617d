"""``/api/mcp-servers``: admins list, add and remove MCP servers (env and header values
are never shown; their names are)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from agentweb.mcpservers import actions
from agentweb.mcpservers.api_input import AddServer
from agentweb.mcpservers.models import McpServer
from agentweb.runs.api import api_view, read_body
from agentweb.runs.errors import NotFound


@api_view(("GET", "POST"))
def servers(request: HttpRequest) -> HttpResponse:
    actions.check_may_manage(request.user)
    if request.method == "GET":
        return JsonResponse({"servers": [s.as_json() for s in McpServer.objects.all()]})
    body = AddServer.parse(read_body(request))
    server = actions.do_add_server(
        name=body.name,
        command=body.command,
        url=body.url,
        env=body.env,
        headers=body.headers,
        actor=request.user,
    )
    return JsonResponse(server.as_json(), status=201)


@api_view(("GET", "DELETE"))
def server(request: HttpRequest, name: str) -> HttpResponse:
    actions.check_may_manage(request.user)
    found = McpServer.objects.filter(name=name).first()
    if found is None:
        raise NotFound(f"no MCP server {name!r}")
    if request.method == "DELETE":
        actions.do_remove_server(found, actor=request.user)
        return HttpResponse(status=204)
    return JsonResponse(found.as_json())
