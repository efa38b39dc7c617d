from django.urls import path

from agentweb.mcpservers import api

urlpatterns = [
    path("mcp-servers", api.servers, name="api-mcp-servers"),
    path("mcp-servers/<str:name>", api.server, name="api-mcp-server"),
]
