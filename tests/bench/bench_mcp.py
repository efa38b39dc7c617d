"""What an MCP call costs over a local ``@tool``, and what a stdio server's restart costs.

Each call goes the way a run's call goes (``runtime.execution.run_tools``: the shared tool
pool, the argument model or JSON-Schema check, the result mapping): a local ``@tool`` echo
(the floor, measured in the same run), the same echo on an MCP server over stdio and over
Streamable HTTP (our SDK server, and the npm reference server), one call at a time. A
restart: a stdio server crashes during a call, and the next call starts it again; we time
that next call (and a first connection from nothing). Medians and p95; no bars.

    python tests/bench/bench_mcp.py [--calls N] [--restarts N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentweb.runtime import mcpclient, tool  # noqa: E402
from agentweb.runtime.execution import Invocation, run_tools  # noqa: E402
from agentweb.runtime.mcpserver import ServerConfig  # noqa: E402
from agentweb.runtime.mcptools import make_tools  # noqa: E402
from agentweb.runtime.tools import Tool, ToolContext  # noqa: E402
from tests.fakes import mcp_servers  # noqa: E402


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


def call_once(t: Tool, arguments: dict[str, str]) -> float:
    """Milliseconds for one call, the way the loop runs one."""
    ctx = ToolContext(call_id=f"bench-{uuid.uuid4().hex[:12]}", run_id="bench")
    started = time.perf_counter()
    [result] = run_tools([Invocation(t, t.parse(arguments), ctx, t.timeout)])
    elapsed = (time.perf_counter() - started) * 1000
    if not result.ok:
        raise RuntimeError(f"{t.name}: {result.error}")
    return elapsed


def series(t: Tool, arguments: dict[str, str], n: int) -> list[float]:
    for _ in range(5):
        call_once(t, arguments)  # warm: connected, pool threads made
    return [call_once(t, arguments) for _ in range(n)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def report(name: str, ms: list[float], floor: float | None = None) -> float:
    median = statistics.median(ms)
    line = f"{name:<46} p50 {median:9.3f} ms   p95 {pct(ms, 0.95):9.3f} ms   (n={len(ms)})"
    if floor is not None:
        line += f"   overhead p50 {median - floor:+.2f} ms ({median / floor:.0f}x)"
    print(line, flush=True)
    return median


def sdk_alone(config: ServerConfig, name: str, arguments: dict[str, str], n: int) -> list[float]:
    """The SDK's own ``Client`` in an asyncio loop of this thread, same server, same calls:
    what the server and the SDK cost without our threads, checks and mapping."""
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    if config.command:
        target: object = StdioServerParameters(
            command=config.command[0], args=list(config.command[1:]), cwd=config.cwd
        )
    else:
        target = config.url

    async def go() -> list[float]:
        async with Client(target, cache=None) as client:  # type: ignore[arg-type]
            for _ in range(5):
                await client.call_tool(name, arguments)
            out = []
            for _ in range(n):
                started = time.perf_counter()
                await client.call_tool(name, arguments)
                out.append((time.perf_counter() - started) * 1000)
            return out

    return asyncio.run(go())


def server_tool(config: ServerConfig, name: str) -> Tool:
    tools, _ = make_tools(config, mcpclient.connection(config).list_tools())
    return next(t for t in tools if t.name == f"{config.name}__{name}")


def restart_costs(config: ServerConfig, echo_name: str, n: int) -> tuple[list[float], list[float]]:
    """(a crash's next call, a first connection and call) in milliseconds."""
    conn = mcpclient.connection(config)
    conn.list_tools()
    after_crash: list[float] = []
    for i in range(n):
        with suppress(mcpclient.McpFault):
            conn.call("crash", {}, call_id=f"crash-{i}")
        started = time.perf_counter()
        conn.call(echo_name, {"text": "back"}, call_id=f"after-{i}")
        after_crash.append((time.perf_counter() - started) * 1000)
    fresh: list[float] = []
    for i in range(n):
        mcpclient.close_all()
        started = time.perf_counter()
        mcpclient.connection(config).call(echo_name, {"text": "new"}, call_id=f"fresh-{i}")
        fresh.append((time.perf_counter() - started) * 1000)
    return after_crash, fresh


def everything_crash_costs(config: ServerConfig, n: int) -> list[float]:
    """The reference server has no crash tool: kill its process, then time the next call."""
    import os
    import signal

    conn = mcpclient.connection(config)
    conn.call("echo", {"message": "up"}, call_id="up")
    out: list[float] = []
    for i in range(n):
        for pid in mcpclient.live_processes():
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while conn._session is not None and conn._session.usable and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.perf_counter()
        conn.call("echo", {"message": "back"}, call_id=f"k-{i}")
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--restarts", type=int, default=10)
    args = parser.parse_args()
    n = args.calls

    floor = report("local @tool echo (floor)", series(echo, {"text": "hi"}, n))
    rows: list[tuple[str, Callable[[], Tool], dict[str, str]]] = []
    with ExitStack() as stack:
        faulty_url = stack.enter_context(mcp_servers.http_server("faulty"))
        everything_url = stack.enter_context(mcp_servers.http_server("everything"))
        faulty = mcp_servers.faulty_stdio(connect_timeout=60)
        everything = mcp_servers.everything_stdio(connect_timeout=60)
        rows = [
            ("MCP stdio, our SDK server (Python)", lambda: server_tool(faulty, "echo"), {}),
            (
                "MCP stdio, reference server (Node)",
                lambda: server_tool(everything, "echo"),
                {"message": "hi"},
            ),
            (
                "MCP Streamable HTTP, our SDK server",
                lambda: server_tool(ServerConfig("webfaulty", url=faulty_url), "echo"),
                {},
            ),
            (
                "MCP Streamable HTTP, reference server",
                lambda: server_tool(ServerConfig("webeverything", url=everything_url), "echo"),
                {"message": "hi"},
            ),
        ]
        configs = [faulty, everything, ServerConfig("w1", url=faulty_url)]
        configs.append(ServerConfig("w2", url=everything_url))
        for (name, make, arguments), config in zip(rows, configs, strict=True):
            given = arguments or {"text": "hi"}
            ours = report(name, series(make(), given, n), floor)
            tool_name = "echo"
            sdk = report(
                "  the SDK's Client alone, same server", sdk_alone(config, tool_name, given, n)
            )
            print(f"{'  ours over the SDK alone':<46} {ours - sdk:+8.2f} ms", flush=True)
        mcpclient.close_all()

        after, fresh = restart_costs(faulty, "echo", args.restarts)
        report("stdio restart: next call after a crash (Python)", after)
        report("stdio: first connection and call (Python)", fresh)
        mcpclient.close_all()
        report(
            "stdio restart: next call after kill -9 (Node)",
            everything_crash_costs(everything, args.restarts),
        )
        mcpclient.close_all()
    print(f"leftover child processes: {len(mcpclient.live_processes())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
