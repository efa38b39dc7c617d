from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "agentweb.web"
    label = "web"

    def ready(self) -> None:
        _widen_channel_layer_read_timeout()


# redis-py 8 gives every connection a 5 s read timeout by default; channels-redis blocks in
# BZPOPMIN for 5 s while a consumer waits for messages, so an idle WebSocket consumer died
# with "Timeout reading from redis" every few seconds. Until settings pass a larger
# socket_timeout themselves, give channel-layer hosts one longer than the blocking pop.
CHANNEL_LAYER_SOCKET_TIMEOUT = 30


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
            if isinstance(host, dict) and "socket_timeout" not in host:
                host = {**host, "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT}
            widened.append(host)
        if widened:
            config["hosts"] = widened
