"""Running untrusted Python in a bubblewrap sandbox.

The child sees read-only system folders (``/usr`` and the ``/lib``, ``/bin`` links into
it), an empty read-only root, a private ``/proc`` and ``/dev``, and the run's workspace
at ``/workspace`` as its only writable place and working directory. It has no network
(a fresh network namespace with nothing in it), no environment of the worker
(``--clearenv``), its own PID namespace and session, and dies with the worker.

Limits: CPU time, address space and file size are set by a small bootstrap inside the
sandbox before the code runs (hard limits: the code cannot raise them); wall time is
kept from outside (the process group is killed); stdout and stderr are each kept to
their first ``output_bytes``. Where bubblewrap is missing or cannot create namespaces,
``run`` refuses: code is never run without isolation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agentweb.runtime.tools import ToolError

BWRAP = "/usr/bin/bwrap"
PYTHON = "/usr/bin/python3"
MOUNT = "/workspace"
MEMORY_EXIT = 86  # the bootstrap's exit code for a MemoryError

_BOOTSTRAP = f"""
import resource, sys, traceback
cpu, mem, fsize = (int(v) for v in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
code = sys.stdin.read()
sys.stdin.close()
sys.argv = ["<run_python>"]
del cpu, mem, fsize
try:
    exec(compile(code, "<run_python>", "exec"), {{"__name__": "__main__"}})
except MemoryError:
    traceback.print_exc()
    sys.stderr.flush()
    import os
    os._exit({MEMORY_EXIT})
"""

# Set inside the sandbox; nothing is inherited from the worker.
SANDBOX_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": MOUNT,
    "TMPDIR": MOUNT,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
}


class SandboxUnavailable(ToolError):
    """Isolation cannot be set up here; nothing was run."""


class LimitExceeded(ToolError):
    """The code hit a limit; the message names it."""


@dataclass(frozen=True, slots=True)
class Limits:
    wall_seconds: float = 60.0
    cpu_seconds: int = 30
    memory_bytes: int = 1 << 30
    output_bytes: int = 64 * 1024
    file_bytes: int = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Completed:
    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    seconds: float


def bwrap_args(workspace: Path) -> list[str]:
    args = [
        BWRAP,
        "--unshare-all",  # user, ipc, pid, net, uts, cgroup: no network at all
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    args += ["--proc", "/proc", "--dev", "/dev", "--dir", "/tmp"]  # noqa: S108 - its own
    args += ["--bind", str(workspace), MOUNT, "--chdir", MOUNT]
    for key, value in SANDBOX_ENV.items():
        args += ["--setenv", key, value]
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return args


_checked: str | None = None
_check_lock = threading.Lock()


def unavailable_reason() -> str | None:
    """Why isolation cannot be used here (None when it works); checked by starting an
    empty sandbox once per process."""
    global _checked
    if not (os.path.isfile(BWRAP) and os.access(BWRAP, os.X_OK)):
        return (
            f"refused: the Python sandbox is unavailable: bubblewrap ({BWRAP}) is not installed "
            "(apt-get install bubblewrap); code is never run without isolation"
        )
    if not os.path.isfile(PYTHON):
        return f"refused: the Python sandbox is unavailable: {PYTHON} is not installed"
    with _check_lock:
        if _checked == "ok":
            return None
        probe = Path(tempfile.gettempdir())
        try:
            proc = subprocess.run(
                [*bwrap_args(probe), PYTHON, "-I", "-c", "pass"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=20,
                env={},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"refused: the Python sandbox is unavailable: bubblewrap failed to start ({exc})"
        if proc.returncode != 0:
            why = proc.stderr.decode("utf-8", "replace").strip()[:300] or f"exit {proc.returncode}"
            return (
                "refused: the Python sandbox is unavailable: bubblewrap cannot create its "
                f"namespaces here ({why}); in Docker see the README for the flags it needs. "
                "Code is never run without isolation"
            )
        _checked = "ok"
        return None


def _drain(stream: object, keep: int, sink: list[bytes], total: list[int]) -> None:
    read = stream.read  # type: ignore[attr-defined]
    kept = 0
    while True:
        chunk = read(65536)
        if not chunk:
            return
        total[0] += len(chunk)
        if kept < keep:
            part = chunk[: keep - kept]
            sink.append(part)
            kept += len(part)


def run(code: str, workspace: Path, limits: Limits | None = None) -> Completed:
    """Run ``code`` in the sandbox; raises ``SandboxUnavailable`` or ``LimitExceeded``."""
    limits = limits or Limits()
    reason = unavailable_reason()
    if reason is not None:
        raise SandboxUnavailable(reason)
    argv = [
        *bwrap_args(workspace),
        PYTHON,
        "-I",  # isolated: no user site, no PYTHON* variables, no script folder on the path
        "-c",
        _BOOTSTRAP,
        str(limits.cpu_seconds),
        str(limits.memory_bytes),
        str(limits.file_bytes),
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={},
        start_new_session=True,
        close_fds=True,
    )
    out: list[bytes] = []
    err: list[bytes] = []
    out_total, err_total = [0], [0]
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, limits.output_bytes, out, out_total)),
        threading.Thread(target=_drain, args=(proc.stderr, limits.output_bytes, err, err_total)),
    ]
    for t in readers:
        t.daemon = True
        t.start()
    timed_out = False
    try:
        assert proc.stdin is not None
        try:
            proc.stdin.write(code.encode("utf-8", "surrogatepass"))
            proc.stdin.close()
        except BrokenPipeError:
            pass
        proc.wait(timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if proc.poll() is None:
            _kill(proc)
        for t in readers:
            t.join(timeout=5)
    seconds = round(time.monotonic() - started, 3)
    code_ = proc.returncode
    if timed_out:
        raise LimitExceeded(
            f"wall-clock limit: the code ran longer than {limits.wall_seconds:g} s and was killed"
        )
    if code_ in (-signal.SIGXCPU, 128 + signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGKILL):
        raise LimitExceeded(
            f"CPU-time limit: the code used more than {limits.cpu_seconds} s of CPU and was killed"
        )
    if code_ == MEMORY_EXIT:
        raise LimitExceeded(
            f"memory limit: the code tried to use more than {limits.memory_bytes // (1 << 20)} MiB "
            f"and got a MemoryError ({_tail(err)})"
        )
    if code_ in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        raise LimitExceeded(
            f"file-size limit: the code wrote a file larger than {limits.file_bytes} bytes"
        )
    return Completed(
        exit_code=code_,
        stdout=b"".join(out).decode("utf-8", "replace"),
        stderr=b"".join(err).decode("utf-8", "replace"),
        stdout_bytes=out_total[0],
        stderr_bytes=err_total[0],
        seconds=seconds,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill bwrap's process group; the sandboxed child dies with it (--die-with-parent,
    and with PID 1 of its namespace)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tail(chunks: list[bytes]) -> str:
    text = b"".join(chunks).decode("utf-8", "replace").strip().splitlines()
    return text[-1][:200] if text else "no output"
