"""Shared fixtures. The live stack (Daphne + a real Celery worker) runs as subprocesses
against the test database, so end-to-end tests see what users see."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent

# The session's web and worker (the ``web`` and ``worker`` fixtures) serve a queue of their
# own. Runs a test enqueues in this process go to the default queue, which no worker of the
# session consumes, unless the test holds ``worker``. On the default queue the session's
# worker, once an earlier test had started it, ran later tests' runs behind their backs:
# their pages showed its steps, and its transactions deadlocked their database flush.
STACK_QUEUE = f"stack-{os.getpid()}"


def _database_url(db: dict[str, Any]) -> str:
    user = quote(db.get("USER") or "")
    password = quote(db.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    if host.startswith("/"):
        return f"postgresql://{auth}/{db['NAME']}?host={host}"
    return f"postgresql://{auth}{host}{port}/{db['NAME']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's, and before the test database is dropped: the sessions this
    process keeps besides its threads' connections let go (the connection pool's idle
    connections, the lease keeper's session); one still open made the drop warn
    "database ... is being accessed by other users" and leave the database behind.

    A WebSocket test leaves one more: a consumer's read in its pool thread (``ws-read``)
    opens a connection inside the context asgiref copies for the call, and asgiref hands
    that context's values back to the awaiting task, here the test's, which outlives the
    call (a server's consumer task ends with its socket, and the connection goes back to
    the pool). Those sessions of this process are ended; any other process's are named
    in a warning."""
    yield
    from django.db import connections

    from agentweb.runs import leases

    leases.keeper.close()
    for conn in connections.all(initialized_only=True):
        close_pool = getattr(conn, "close_pool", None)
        if callable(close_pool):
            close_pool()
    with django_db_blocker.unblock():
        others = _end_own_sessions()
    if others:  # the drop will warn; say whose sessions they are
        warnings.warn("open on the test database: " + "; ".join(others), stacklevel=1)


def _end_own_sessions() -> list[str]:
    """End the test database's sessions whose client is this process (besides this
    connection); the others, each with the local process holding its socket."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, client_port, application_name, state, left(query, 80), backend_start "
            "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        others = []
        for pid, port, app, state, query, started in cursor.fetchall():
            owner, where = _owner_of_port(port)
            if owner == os.getpid():
                cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
                continue
            others.append(
                f"backend {pid} (client port {port}, {where}, app {app!r}, {state}, "
                f"since {started:%H:%M:%S}, last query {query!r})"
            )
    connection.close()
    return others


def _owner_of_port(port: int | None) -> tuple[int | None, str]:
    """Which local process holds the TCP socket whose local port is ``port`` (Linux): its
    pid and a description."""
    if not port or port < 0:
        return None, "over a Unix socket"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fds: list[str] = []
        with contextlib.suppress(OSError):  # a process that ended, or not ours to read
            fds = os.listdir(f"/proc/{pid}/fd")
        for fd in fds:
            target = ""
            with contextlib.suppress(OSError):  # closed meanwhile (the listing's own)
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in inodes:
                cmd = b""
                with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                this = ""
                if int(pid) == os.getpid():  # which of its threads: those alive now
                    names = sorted({t.name for t in threading.enumerate()})
                    this = f" (this pytest process; threads alive: {', '.join(names)})"
                text = cmd.replace(b"\0", b" ").decode(errors="replace")[:80].strip()
                return int(pid), f"pid {pid}{this}: {text}"
    return None, "no local process"


@pytest.fixture(scope="session")
def stack_env(django_db_setup: None) -> dict[str, str]:
    """Environment for subprocesses: the test database, the test Redis."""
    from django.conf import settings

    env = dict(os.environ)
    env["DATABASE_URL"] = _database_url(settings.DATABASES["default"])
    env["DEBUG"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("AGENTWEB_LEASE_SECONDS", "30")
    env.setdefault("AGENTWEB_SITE_URL", "http://127.0.0.1")  # links in mails (with SMTP set)
    env["AGENTWEB_QUEUE"] = STACK_QUEUE  # fixtures with a stack of their own override it
    return env


class Proc:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log_path = name, argv, env, log
        self.node = ""  # a worker's Celery node name
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        os.killpg(self.proc.pid, 9)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
                self.proc.wait(timeout=15)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.log.close()


def start_worker(
    env: dict[str, str], tmp: Path, name: str = "worker", concurrency: int = 4
) -> Proc:
    node = f"{name}-{os.getpid()}@{socket.gethostname()}"
    proc = Proc(
        name,
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentweb",
            "worker",
            "-P",
            "threads",
            "-c",
            str(concurrency),
            "-l",
            "INFO",
            "-n",
            node,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        env,
        tmp / f"{name}.log",
    )
    proc.node = node
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "ready." in proc.output():
            return proc
        if proc.proc.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{proc.output()}")
        time.sleep(0.1)
    proc.stop()
    raise RuntimeError(f"worker not ready in 60s:\n{proc.output()}")


def start_beat(env: dict[str, str], tmp: Path) -> Proc:
    return Proc(
        "beat",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentweb",
            "beat",
            "-l",
            "INFO",
            "-s",
            str(tmp / "beat-schedule"),
        ],
        env,
        tmp / "beat.log",
    )


def start_web(env: dict[str, str], tmp: Path, port: int | None = None) -> tuple[Proc, str]:
    port = port or free_port()
    proc = Proc(
        "web",
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "agentweb.asgi:application",
        ],
        env,
        tmp / "web.log",
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/accounts/login/", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.proc.poll() is not None:
            raise RuntimeError(f"web exited early:\n{proc.output()}")
        time.sleep(0.1)
    proc.stop()
    raise RuntimeError(f"web not ready in 60s:\n{proc.output()}")


def worker_is_idle(proc: Proc, queue: str) -> bool:
    """No task running or reserved in the worker, and none waiting in its queue."""
    from agentweb.celery import app

    inspect = app.control.inspect([proc.node], timeout=5, limit=1)
    busy = [inspect.active(), inspect.reserved()]
    if any(reply is None for reply in busy):
        return False  # no answer yet: busy, or still starting
    if any(tasks for reply in busy for tasks in reply.values()):
        return False
    with app.connection_for_write() as conn:
        try:
            declared = conn.default_channel.queue_declare(queue=queue, passive=True)
        except conn.channel_errors:  # Redis keeps no key for an empty queue
            return True
        return int(declared.message_count) == 0


_STACK: dict[str, Proc] = {}  # the session's worker, once a test has asked for it


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Processes a test starts (workers, beat): stopped after it, the last started first."""
    started: list[Proc] = []
    yield started
    for proc in reversed(started):
        proc.stop()


@pytest.fixture(scope="session")
def _stack_worker(
    stack_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proc]:
    proc = start_worker(stack_env, tmp_path_factory.mktemp("worker"))
    _STACK["worker"] = proc
    yield proc
    del _STACK["worker"]
    proc.stop()


@pytest.fixture
def worker(
    _stack_worker: Proc, transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Proc]:
    """The session's worker (demo model), serving this test: the runs this test enqueues
    go to its queue. When the test ends it waits until the worker is idle, before the
    database is flushed (``transactional_db`` is torn down after this fixture)."""
    from agentweb.celery import app
    from agentweb.runs import queue

    monkeypatch.setattr(
        queue,
        "send",
        lambda task, *args, **kw: app.send_task(task, args=list(args), queue=STACK_QUEUE, **kw),
    )
    yield _stack_worker
    # Idle twice in a row: a task that ended between the two looks may have sent another.
    wait_for(
        lambda: (
            worker_is_idle(_stack_worker, STACK_QUEUE)
            and worker_is_idle(_stack_worker, STACK_QUEUE)
        ),
        timeout=60,
        interval=0.1,
    )


@pytest.fixture(autouse=True)
def _no_version_of_an_earlier_test() -> None:
    """Each test reads profile versions afresh. The process keeps a version's data by
    (profile, number), which holds where a version once committed never changes; a test's
    rolled-back transaction takes its versions with it, and the next test numbers its own
    from 1 again, so a kept one was an earlier test's (``test_policies`` after
    ``tests/shop`` ran with the shop tests' policies and paused)."""
    from agentweb.runs import versions

    versions.forget_kept()


@pytest.fixture(autouse=True)
def _no_run_behind_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that does not hold ``worker`` gets nothing run by the session's worker."""
    proc = _STACK.get("worker")
    if proc is None or "worker" in request.fixturenames:
        yield
        return
    start = proc.log_path.stat().st_size
    yield
    with open(proc.log_path, "rb") as log:
        log.seek(start)
        taken = [line for line in log.read().splitlines() if b"] received" in line]
    assert not taken, (
        "the session's worker took tasks during a test that does not hold the `worker` "
        f"fixture (something sent runs to {STACK_QUEUE}): {taken[:3]}"
    )


@pytest.fixture(scope="session")
def web(stack_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_web(stack_env, tmp_path_factory.mktemp("web"))
    yield url
    proc.stop()


@pytest.fixture
def demo(transactional_db: None) -> dict[str, Any]:
    """Demo users, roles, agent profiles and shop, committed so other processes see them."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    os.environ.setdefault("AGENTWEB_DEMO_PASSWORD", "demo-pass-123")
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    User = get_user_model()
    return {
        "password": os.environ["AGENTWEB_DEMO_PASSWORD"],
        "operator": User.objects.get(username="operator"),
        "approver": User.objects.get(username="approver"),
        "admin": User.objects.get(username="admin"),
    }


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met in {timeout}s")
