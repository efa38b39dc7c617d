"""A receive from the channel layer that is cancelled ends, at whatever step it is hit.

On Python 3.11, redis-py's own connections lose a cancellation that lands right after a
write (``asyncio.wait_for``); the task then goes on to its blocking read. A consumer or
the run fan-out whose receive was cancelled that way never ended, and the suite hung in
the event loop's shutdown after the last WebSocket test."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from channels.layers import get_channel_layer
from redis.asyncio.connection import Connection, UnixDomainSocketConnection

from agentweb.channel_layer import (
    LayerConnection,
    LayerSSLConnection,
    LayerUnixConnection,
    RedisLayer,
    layer_host,
)

STEPS = range(8)  # loop steps between starting a command and cancelling it
LAYER_STEPS = range(40)  # a layer receive writes later (a cleanup script first)


def _host() -> dict[str, Any]:
    """The connection arguments of the layer as configured."""
    host: dict[str, Any] = dict(get_channel_layer().hosts[0])
    host.pop("max_connections", None)
    return host


async def _ends_cancelled(connection_class: type, steps: int) -> bool:
    """Start a blocking pop, cancel it after ``steps`` loop steps; True when the task
    ended cancelled, False when the cancellation was lost and the pop went on."""
    options = _host()
    options.pop("connection_class")
    conn = connection_class(**options)
    await conn.connect()

    async def pop() -> Any:
        await conn.send_command("BLPOP", "agentweb:test:never-pushed", 1)
        return await conn.read_response()

    task = asyncio.ensure_future(pop())
    for _ in range(steps):
        await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return True
    finally:
        await conn.disconnect()
    return False


async def test_a_cancelled_command_on_the_layers_connections_always_ends() -> None:
    assert isinstance(get_channel_layer(), RedisLayer)
    assert _host()["connection_class"] in (LayerConnection, LayerUnixConnection)
    ended = [await _ends_cancelled(_host()["connection_class"], k) for k in STEPS]
    assert ended == [True] * len(STEPS)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for was fixed in 3.12")
async def test_redis_pys_own_connection_loses_some_of_those_cancellations() -> None:
    """The hazard the connections above remove: the same steps on redis-py's class."""
    theirs = {LayerConnection: Connection, LayerUnixConnection: UnixDomainSocketConnection}
    ended = [await _ends_cancelled(theirs[_host()["connection_class"]], k) for k in STEPS]
    assert False in ended, ended


async def test_a_cancelled_layer_receive_ends_and_the_next_one_works() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    for steps in LAYER_STEPS:
        receiver = asyncio.ensure_future(layer.receive(channel))
        for _ in range(steps):
            await asyncio.sleep(0)
        receiver.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(receiver, timeout=10)
    await layer.send(channel, {"type": "ping", "n": 1})
    assert await asyncio.wait_for(layer.receive(channel), timeout=10) == {"type": "ping", "n": 1}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6379/2", LayerConnection),
        ("rediss://cache.example:6380/0", LayerSSLConnection),
        ("unix:///tmp/redis.sock?db=3", LayerUnixConnection),
    ],
)
def test_every_kind_of_redis_url_gets_the_cancellable_connection(url: str, expected: type) -> None:
    host = layer_host(url, socket_timeout=30, max_connections=5)
    assert host["connection_class"] is expected
    assert host["socket_timeout"] == 30 and host["max_connections"] == 5
    assert "address" not in host


async def test_a_group_send_reaches_members_and_costs_an_empty_group_one_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nobody watching: ZRANGE only (no expiry sweep, no script). A member, or one whose
    time ran out, still gets channels-redis' whole send."""
    from redis.asyncio import Redis

    sent: list[str] = []
    for name in ("zrange", "zremrangebyscore", "eval"):
        real = getattr(Redis, name)

        def spy(self: Any, *args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            sent.append(_name)
            return _real(self, *args, **kw)

        monkeypatch.setattr(Redis, name, spy)
    layer = type(get_channel_layer())(
        hosts=get_channel_layer().hosts, expiry=30, group_expiry=86400, capacity=100
    )
    group = f"agentweb-test-{id(layer)}"
    await layer.group_send(group, {"type": "run.event", "seq": 1})
    assert sent == ["zrange"]

    sent.clear()
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    await layer.group_send(group, {"type": "run.event", "seq": 2})
    assert await asyncio.wait_for(layer.receive(channel), timeout=10) == {
        "type": "run.event",
        "seq": 2,
    }
    assert sent[0] == "zrange" and "eval" in sent  # channels-redis' own send after the look

    # A member whose time ran out: found by the look, then dropped by channels-redis' sweep.
    await layer.group_discard(group, channel)
    stale = await layer.new_channel()
    await layer.group_add(group, stale)
    key = layer._group_key(group)
    await layer.connection(layer.consistent_hash(group)).zadd(key, {stale: 1})  # long ago
    await layer.group_send(group, {"type": "run.event", "seq": 3})
    assert await layer.connection(layer.consistent_hash(group)).zrange(key, 0, -1) == []
    await layer.close_pools()
