"""run_python: each limit and each wall of the sandbox, tried for real."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agentweb.runtime.execution import Invocation, run_tools
from agentweb.runtime.tools import ToolContext
from tools.workbench import python as python_tool
from tools.workbench import sandbox, workspace

# Where bubblewrap works (CI installs it) every isolation test runs; the refusal tests at
# the end run everywhere.
needs_bwrap = pytest.mark.skipif(
    sandbox.unavailable_reason() is not None, reason=str(sandbox.unavailable_reason())
)

QUICK = sandbox.Limits(wall_seconds=10, cpu_seconds=2)
CPU_BOUND = sandbox.Limits(wall_seconds=60, cpu_seconds=1)  # the CPU limit comes first


def run(code: str, ws: Path, limits: sandbox.Limits = QUICK) -> sandbox.Completed:
    return sandbox.run(code, ws, limits)


@pytest.fixture
def ws() -> Path:
    return workspace.workspace_path("sbx")


def call_tool(code: str, ctx: ToolContext):
    parsed = python_tool.run_python.parse({"code": code})
    return run_tools([Invocation(python_tool.run_python, parsed, ctx, 30)])[0]


@needs_bwrap
def test_it_runs_code_in_the_workspace(ws: Path) -> None:
    done = run("import os; open('out.txt', 'w').write('42'); print(os.getcwd())", ws)
    assert done.exit_code == 0
    assert done.stdout.strip() == "/workspace"
    assert (ws / "out.txt").read_text() == "42"


@needs_bwrap
def test_it_has_no_network(ws: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(1)
    waiter = threading.Thread(target=lambda: accepted.append(_accept(server)), daemon=True)
    waiter.start()
    code = (
        "import socket\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    print('connected')\n"
        "except OSError as exc:\n    print('refused', exc)\n"
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\n"
    )
    done = run(code, ws)
    waiter.join(5)
    server.close()
    assert done.stdout.startswith("refused"), done.stdout
    assert "['lo']" in done.stdout  # no interface but its own loopback
    assert accepted == [None]  # the host's server never saw a connection


def _accept(server: socket.socket) -> object:
    try:
        conn, _ = server.accept()
    except OSError:
        return None
    conn.close()
    return "accepted"


@needs_bwrap
def test_an_endless_loop_is_killed_at_the_cpu_limit(ws: Path) -> None:
    started = time.monotonic()
    with pytest.raises(sandbox.LimitExceeded, match="CPU-time limit"):
        run("while True:\n    pass\n", ws, CPU_BOUND)
    assert time.monotonic() - started < 55


@needs_bwrap
def test_a_sleeping_process_and_its_children_are_killed_at_the_wall_clock(ws: Path) -> None:
    marker = f"{os.getpid()}.{time.monotonic_ns() % 100000}"
    code = (
        "import os, time\n"
        f"if os.fork() == 0:\n    os.execv('/usr/bin/sleep', ['sleep', '{marker}'])\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(sandbox.LimitExceeded, match="wall-clock limit"):
        run(code, ws, sandbox.Limits(wall_seconds=1.5, cpu_seconds=30))
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a child of the sandboxed code outlived the kill"


@needs_bwrap
def test_four_gigabytes_are_refused(ws: Path) -> None:
    with pytest.raises(sandbox.LimitExceeded, match="memory limit"):
        run("x = bytearray(4 * 1024**3)\nprint('allocated')", ws)


@needs_bwrap
def test_fifty_megabytes_of_output_are_cut_to_the_first_64_kib(ws: Path, ctx: ToolContext) -> None:
    res = call_tool("import sys\nsys.stdout.write('x' * 50_000_000)\nprint('end')", ctx)
    assert res.ok, res.error
    out = res.result["stdout"]
    assert out.startswith("x" * 1000)
    assert "[output truncated: showing the first 65536 of 50000004 bytes]" in out
    assert len(out) < 65536 + 200
    assert res.result["truncated"] is True


@needs_bwrap
@pytest.mark.parametrize(
    "target", ["/usr/evil", "/evil", "/tmp/evil", "/etc/evil", "/proc/evil", "/dev/shm/evil"]
)
def test_writes_outside_the_workspace_are_refused(ws: Path, target: str) -> None:
    done = run(f"open({target!r}, 'w').write('x')", ws)
    assert done.exit_code != 0
    assert "Error" in done.stderr
    assert not Path(target).exists()


@needs_bwrap
def test_host_files_are_invisible(ws: Path, tmp_path: Path) -> None:
    secret = Path("/tmp") / f"h16-secret-{os.getpid()}"
    secret.write_text("host secret")
    try:
        checks = ["/etc/passwd", "/home", "/root", str(secret), str(Path.cwd()), str(tmp_path)]
        code = f"import os\nfor p in {checks!r}:\n    print(p, os.path.exists(p))\n"
        done = run(code, ws)
    finally:
        secret.unlink()
    assert done.exit_code == 0, done.stderr
    for line in done.stdout.splitlines():
        assert line.endswith(" False"), line


@needs_bwrap
def test_the_environment_is_not_inherited(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H16_SECRET_TOKEN", "sk-do-not-leak")
    done = run("import os, json; print(json.dumps(dict(os.environ)))", ws)
    assert "sk-do-not-leak" not in done.stdout
    import json

    env = json.loads(done.stdout)
    assert set(env) <= set(sandbox.SANDBOX_ENV) | {"PWD", "LC_CTYPE"}
    assert "DATABASE_URL" not in env and "REDIS_URL" not in env


@needs_bwrap
def test_a_limit_is_a_failed_call_naming_it(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(python_tool, "LIMITS", CPU_BOUND)
    res = call_tool("while True:\n    pass\n", ctx)
    assert not res.ok
    assert res.error.startswith("CPU-time limit")


def test_without_bubblewrap_it_refuses_and_runs_nothing(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "BWRAP", "/nonexistent/bwrap")
    monkeypatch.setattr(sandbox, "_checked", None)
    res = call_tool("open('ran.txt', 'w').write('ran')", ctx)
    assert not res.ok
    assert "sandbox is unavailable" in res.error and "never run without isolation" in res.error
    assert not (workspace.workspace_path(ctx.run_id) / "ran.txt").exists()


def test_when_namespaces_cannot_be_made_it_refuses(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "BWRAP", str(fake))
    monkeypatch.setattr(sandbox, "_checked", None)
    res = call_tool("print(1)", ctx)
    assert not res.ok
    assert "cannot create its namespaces" in res.error
    assert "No permissions" in res.error
