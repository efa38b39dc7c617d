"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentweb.settings")
django_asgi_app = get_asgi_application()

from agentweb import gcfreeze, http_limits  # noqa: E402
from agentweb.intake_lane import IntakeLane  # noqa: E402
from agentweb.observability import logs  # noqa: E402

http_limits.install()  # oversized or malformed headers get a JSON answer, not silence

if logs.json_enabled():
    logs.route_daphne_access_log()  # the access log as JSON records too
    logs.capture_uncaught()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from agentweb.web.routing import websocket_application  # noqa: E402

# HTTP: requests that start runs take turns (intake_lane), the rest go straight through.
# Sockets: same-origin check (scheme, host and port), session auth, then the routes.
application = ProtocolTypeRouter(
    {"http": IntakeLane(django_asgi_app), "websocket": websocket_application()}
)

# Everything the web serves with is imported: out of the collector's full passes.
gcfreeze.freeze_start_up()
