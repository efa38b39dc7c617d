from typing import Any

from django.urls import path

from agentweb.web import consumers

websocket_urlpatterns: list[Any] = [
    path("ws/runs/<int:run_id>/", consumers.RunConsumer.as_asgi()),
    path("ws/runs/", consumers.RunsConsumer.as_asgi()),
    path("ws/approvals/", consumers.ApprovalsConsumer.as_asgi()),
]
