"""Redis connections for the channel layer that a cancellation always reaches.

redis-py bounds each write by ``asyncio.wait_for(..., socket_timeout)``. On Python 3.11
``wait_for`` drops a cancellation that arrives in the same loop step as the end of the
write it waits on: the write's result is returned and the task goes on as if nothing had
happened. A task that receives from the channel layer (a socket's consumer, the run
fan-out's reader) is then cancelled once, keeps its blocking pop going, and whoever
awaits its end (Channels when a socket closes, an event loop shutting down) waits for
ever. Seen as the test suite hanging after the last WebSocket test, about one run in
three.

The connections here bound the write with ``asyncio.timeout`` instead, which counts
cancellations and passes each on. Reads already use ``asyncio.timeout`` in redis-py.

``settings`` names ``RedisLayer`` as the backend: Channels imports it (and redis-py,
which brings OpenTelemetry's API with it) only when a process first uses the layer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from channels_redis.core import RedisChannelLayer
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.exceptions import TimeoutError as RedisTimeoutError


class _CancellableWrites(AbstractConnection):
    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        limit = self.socket_timeout
        if not limit:
            await super().send_packed_command(command, check_health)
            return
        # Without a socket timeout redis-py writes without wait_for; the limit is ours.
        # A connection serves one command at a time, so nothing else reads the field now.
        self.socket_timeout = None
        try:
            async with asyncio.timeout(limit):
                await super().send_packed_command(command, check_health)
        except TimeoutError:  # asyncio's, raised only when our limit ran out
            raise RedisTimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = limit


class LayerConnection(_CancellableWrites, Connection):
    """TCP."""


class LayerSSLConnection(_CancellableWrites, SSLConnection):
    """TLS (``rediss://``)."""


class LayerUnixConnection(_CancellableWrites, UnixDomainSocketConnection):
    """A unix socket (``unix://``, the embedded Redis of ``make run``)."""


_OURS: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: LayerConnection,
    SSLConnection: LayerSSLConnection,
    UnixDomainSocketConnection: LayerUnixConnection,
}


def layer_host(url: str, **options: Any) -> dict[str, Any]:
    """channels-redis' keyword arguments for one Redis URL, on the connections above.

    Given without ``address``, channels-redis passes them to redis-py's
    ``ConnectionPool`` as they are (with ``address`` the URL's own connection class,
    e.g. a unix socket's, would win over ours)."""
    host: dict[str, Any] = dict(parse_url(url))
    base = host.pop("connection_class", Connection)
    host["connection_class"] = _OURS[base]
    host.update(options)
    return host


class RedisLayer(RedisChannelLayer):
    """channels-redis' layer on the connections above. ``hosts`` as channels-redis takes
    them; an entry with an ``address`` (a URL) is turned into ``layer_host`` arguments."""

    def __init__(self, hosts: list[Any] | None = None, **options: Any) -> None:
        ours = []
        for entry in hosts or []:
            if isinstance(entry, dict) and "address" in entry:
                rest = dict(entry)
                entry = layer_host(rest.pop("address"), **rest)
            ours.append(entry)
        super().__init__(hosts=ours or None, **options)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """A group nobody is in costs one command (ZRANGE), not channels-redis' two: most
        runs' steps are told to a run page that nobody has open. A group with members
        (or members whose time ran out, which channels-redis then removes) is sent to as
        channels-redis sends."""
        assert self.require_valid_group_name(group), "Group name not valid"
        connection = self.connection(self.consistent_hash(group))
        if not await connection.zrange(self._group_key(group), 0, 0):
            return
        await super().group_send(group, message)
