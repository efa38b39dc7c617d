"""WebSocket routes and the checks in front of them (origin, then session, then route)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import path, re_path

from agentweb.web import consumers

websocket_urlpatterns: list[Any] = [
    path("ws/runs/<int:run_id>/", consumers.RunConsumer.as_asgi()),
    path("ws/runs/", consumers.RunsConsumer.as_asgi()),
    path("ws/approvals/", consumers.ApprovalsConsumer.as_asgi()),
    path("ws/tickets/", consumers.TicketsConsumer.as_asgi()),
    # Anything else (/ws/runs/-1/, /ws/runs/abc/, /ws/nope/): 4404, not a server error.
    re_path(r"", consumers.NotFoundConsumer.as_asgi()),
]

_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _origin(scheme: str, netloc: str) -> tuple[str, str, str] | None:
    """(scheme, host, port) with the default port spelt out, or None."""
    if scheme not in _DEFAULT_PORTS or not netloc:
        return None
    host, port = split_domain_port(netloc.lower())
    if not host:
        return None
    return scheme, host, port or _DEFAULT_PORTS[scheme]


class SameOriginValidator:
    """Only pages of this site may open its sockets: the ``Origin`` must equal the
    socket's own origin (scheme, host and port) with a host in ``ALLOWED_HOSTS``, or be
    one of ``CSRF_TRUSTED_ORIGINS`` (a proxy in front). Channels' own validator compares
    host names only, so ``http://host:9999`` or ``http://host`` for an https site passed."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if self.allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)

    @staticmethod
    def allowed(scope: dict[str, Any]) -> bool:
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        try:
            origin_header = headers.get(b"origin", b"").decode("ascii")
            host_header = headers.get(b"host", b"").decode("ascii")
        except UnicodeDecodeError:
            return False
        parts = urlsplit(origin_header)
        origin = _origin(parts.scheme, parts.netloc)
        if origin is None:
            return False
        trusted = {
            _origin(urlsplit(o).scheme, urlsplit(o).netloc) for o in settings.CSRF_TRUSTED_ORIGINS
        }
        if origin in trusted:
            return True
        scheme = "https" if scope.get("scheme") == "wss" else "http"
        proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
        if proxy:
            name = proxy[0].removeprefix("HTTP_").replace("_", "-").lower().encode()
            if headers.get(name, b"").decode("latin-1") == proxy[1]:
                scheme = "https"
        own = _origin(scheme, host_header)
        if own is None or origin != own:
            return False
        allowed_hosts = settings.ALLOWED_HOSTS
        if settings.DEBUG and not allowed_hosts:
            allowed_hosts = [".localhost", "127.0.0.1", "[::1]"]
        return validate_host(own[1], allowed_hosts)


def websocket_application() -> Any:
    return SameOriginValidator(AuthMiddlewareStack(_router()))


def _router() -> Any:
    from channels.routing import URLRouter

    return URLRouter(websocket_urlpatterns)
