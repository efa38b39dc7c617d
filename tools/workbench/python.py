"""``run_python``: Python in a bubblewrap sandbox, in the run's workspace."""

from __future__ import annotations

from typing import Any

from agentweb.runtime.tools import ToolContext, tool

from . import sandbox, workspace

LIMITS = sandbox.Limits()


@tool(risk="medium", timeout=LIMITS.wall_seconds + 15, expected_duration=2.0, idempotent=False)
def run_python(ctx: ToolContext, code: str) -> dict[str, Any]:
    """Run a Python 3 script in an isolated sandbox and return its output. The working
    folder is the run's workspace (files there persist between calls; use read_file and
    write_file too). No network, no installed extras beyond the standard library; limits:
    60 s, 1 GiB of memory, 64 KiB of output shown.

    Args:
        code: The Python source to run; print what you want to see.
    """
    ws = workspace.workspace_path(ctx.run_id)
    done = sandbox.run(code, ws, LIMITS)
    result: dict[str, Any] = {
        "exit_code": done.exit_code,
        "stdout": _with_note(done.stdout, done.stdout_bytes, LIMITS.output_bytes),
        "stderr": _with_note(done.stderr, done.stderr_bytes, LIMITS.output_bytes),
        "seconds": done.seconds,
    }
    if max(done.stdout_bytes, done.stderr_bytes) > LIMITS.output_bytes:
        result["truncated"] = True
    return result


def _with_note(text: str, total: int, limit: int) -> str:
    if total <= limit:
        return text
    return text + f"\n[output truncated: showing the first {limit} of {total} bytes]"
