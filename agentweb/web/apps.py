from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "agentweb.web"
    label = "web"

    def ready(self) -> None:
        _widen_channel_layer_read_timeout()


# redis-py 8 changed two pool defaults that break channels-redis under real use:
# - every connection gets a 5 s read timeout; channels-redis blocks in BZPOPMIN for 5 s
#   while a consumer waits for messages, so an idle WebSocket consumer died with
#   "Timeout reading from redis" every few seconds;
# - an asyncio pool holds at most 100 connections and raises "Too many connections" past
#   that, so 200 sockets subscribing at once (group_add) were refused with HTTP 500.
# Until settings pass these themselves, give channel-layer hosts a read timeout longer
# than the blocking pop and a pool that fits many sockets.
CHANNEL_LAYER_SOCKET_TIMEOUT = 30
CHANNEL_LAYER_MAX_CONNECTIONS = 2000


def _widen_channel_layer_read_timeout() -> None:
    from django.conf import settings

    for layer in getattr(settings, "CHANNEL_LAYERS", {}).values():
        if "channels_redis" not in str(layer.get("BACKEND", "")):
            continue
        config = layer.setdefault("CONFIG", {})
        hosts = config.get("hosts") or []
        widened = []
        for host in hosts:
            if isinstance(host, str):
                host = {"address": host}
            if isinstance(host, dict) and "address" in host:
                host = {
                    "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT,
                    "max_connections": CHANNEL_LAYER_MAX_CONNECTIONS,
                    **host,
                }
            widened.append(host)
        if widened:
            config["hosts"] = widened
