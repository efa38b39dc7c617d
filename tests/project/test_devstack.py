"""`make run` both ways (embedded services, and the machine's PostgreSQL and Redis), a
second shell's manage.py beside it, and stopping: SIGTERM to the one process we started
must end every process of the stack within 15 s and leave no temporary Redis directory."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from agentweb import devstack
from tests.conftest import ROOT, free_port

STOP_WITHIN = 15.0


def _children_of(pid: int) -> set[int]:
    """Every descendant of pid, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for_login_page(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the stack exited with {proc.returncode}:\n{log.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise AssertionError(f"no login page in 180 s:\n{log.read_text()}")


def _wait_for_env_file(var: Path) -> dict[str, str]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        values = devstack.read_env_file(var / "devstack.env")
        if values.get("DEVSTACK_PID"):
            return values
        time.sleep(0.2)
    raise AssertionError("devstack wrote no env file")


def _stack_pids(root_pid: int) -> dict[int, str]:
    return {pid: _cmdline(pid) for pid in _children_of(root_pid) | {root_pid}}


def _assert_all_gone(pids: dict[int, str], started: float) -> float:
    while time.monotonic() - started < STOP_WITHIN:
        left = {pid: cmd for pid, cmd in pids.items() if _alive(pid)}
        if not left:
            return time.monotonic() - started
        time.sleep(0.2)
    left = {pid: cmd for pid, cmd in pids.items() if _alive(pid)}
    for pid in left:  # do not leave them to the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"still running {STOP_WITHIN:.0f} s after SIGTERM: {left}")


def _base_env(var: Path, port: int) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "AGENTWEB_QUEUE", "DJANGO_SETTINGS_MODULE")
    }
    env.update(
        AGENTWEB_VAR_DIR=str(var),
        PORT=str(port),
        AGENTWEB_WORKER_CONCURRENCY="2",
        AGENTWEB_DEMO_PASSWORD="demo-pw-" + secrets.token_hex(4),
        AGENTWEB_QUEUE="devstack-" + secrets.token_hex(4),
        DEBUG="1",
    )
    return env


def _second_shell(var: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """manage.py as a person runs it in another shell: no DATABASE_URL, REDIS_URL, DEBUG."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("DATABASE_URL", "REDIS_URL", "DEBUG", "AGENTWEB_QUEUE", "DJANGO_SETTINGS_MODULE")
    }
    env["AGENTWEB_VAR_DIR"] = str(var)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _admin_url(url: str) -> str:
    # The URL may name a unix socket folder in its query (?host=/path), so only the path
    # (the database name) is swapped.
    return urlunsplit(urlsplit(url)._replace(path="/postgres"))


@pytest.fixture
def machine_database(stack_env: dict[str, str]) -> Any:
    """The URL of a database not yet on the test's PostgreSQL server (``make run``
    creates, migrates and seeds it); dropped afterwards."""
    import psycopg

    base = urlsplit(stack_env["DATABASE_URL"])
    name = "devstack_" + secrets.token_hex(4)
    yield urlunsplit(base._replace(path=f"/{name}"))
    with psycopg.connect(_admin_url(stack_env["DATABASE_URL"]), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _exists(url: str) -> bool:
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(_admin_url(url), autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        return found.fetchone() is not None


def test_a_missing_database_is_created_once_and_an_existing_one_left_alone(
    machine_database: str,
) -> None:
    assert not _exists(machine_database)
    created = devstack.ensure_database(machine_database)
    assert created is not None and urlsplit(machine_database).path.lstrip("/") in created
    assert _exists(machine_database)
    assert devstack.ensure_database(machine_database) is None


def test_a_server_that_is_not_there_is_a_clear_error(stack_env: dict[str, str]) -> None:
    port = free_port()
    url = f"postgresql://postgres@127.0.0.1:{port}/agentweb"
    with pytest.raises(devstack.SetupError, match=f"cannot connect to PostgreSQL on .*:{port}"):
        devstack.ensure_database(url)


def test_a_user_who_may_not_create_the_database_is_told_what_to_do(
    machine_database: str,
) -> None:
    import psycopg

    role = "nocreate_" + secrets.token_hex(4)
    admin = _admin_url(machine_database)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN NOCREATEDB")
    parts = urlsplit(machine_database)
    netloc = f"{role}@{parts.netloc.rpartition('@')[2]}"
    try:
        with pytest.raises(devstack.SetupError, match="does not exist .* may not create it"):
            devstack.ensure_database(urlunsplit(parts._replace(netloc=netloc)))
        assert not _exists(machine_database)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")


def test_make_run_stops_with_that_error_before_starting_anything(tmp_path: Path) -> None:
    port = free_port()
    env = _base_env(tmp_path / "var", free_port())
    env.update(
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/agentweb",
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentweb.devstack", "run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert f"cannot connect to PostgreSQL on 127.0.0.1:{port}" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.e2e
@pytest.mark.slow
def test_make_run_on_the_machines_services_and_sigterm_to_make_stops_it_all(
    tmp_path: Path, machine_database: str, stack_env: dict[str, str]
) -> None:
    if not stack_env.get("REDIS_URL"):
        pytest.skip("REDIS_URL is not set")
    var, port = tmp_path / "var", free_port()
    env = _base_env(var, port)
    env.update(DATABASE_URL=machine_database, REDIS_URL=stack_env["REDIS_URL"])
    log = tmp_path / "make.log"
    with open(log, "wb") as out:
        # -o: never reinstall the (shared) virtualenv from a test.
        make = subprocess.Popen(
            ["make", "-s", "-o", ".venv/.installed", "run"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_login_page(port, make, log)
        values = _wait_for_env_file(var)
        assert values["DATABASE_URL"] == machine_database
        assert values["DEBUG"] == "1"

        # A second shell: manage.py reaches the running stack's database with no env.
        issued = _second_shell(var, "issue_token", "operator", "--name", "second-shell")
        assert issued.returncode == 0, issued.stderr
        token = issued.stdout.strip().splitlines()[-1]
        response = httpx.get(
            f"http://127.0.0.1:{port}/api/runs",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text

        pids = _stack_pids(make.pid)
        names = " ".join(pids.values())
        for part in ("agentweb.devstack run", "daphne", "worker", "beat"):
            assert part in names, names
        started = time.monotonic()
        os.kill(make.pid, signal.SIGTERM)  # make alone: it passes nothing on
        took = _assert_all_gone(pids, started)
        make.wait(timeout=5)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
    assert not (var / "devstack.env").exists()
    assert (var / "celerybeat-schedule.dat").exists() or (var / "celerybeat-schedule").exists()
    # Quiet by default: the start line, no banner, no access log.
    out = log.read_text()
    assert f"running at http://127.0.0.1:{port}/" in out
    assert "created the database" in out, out  # the fixture's database did not exist
    assert "celery@" not in out and "GET /accounts/login/" not in out, out
    # And the env file is gone, so another shell no longer picks anything up.
    assert devstack.read_env_file(var / "devstack.env") == {}
    print(f"stopped in {took:.1f} s")


@pytest.mark.e2e
@pytest.mark.slow
def test_embedded_run_stops_on_sigterm_with_postgres_redis_and_the_redis_dir(
    tmp_path: Path,
) -> None:
    var, port = tmp_path / "var", free_port()
    env = _base_env(var, port)
    log = tmp_path / "devstack.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentweb.devstack", "run"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_login_page(port, proc, log)
        values = _wait_for_env_file(var)
        assert values["DATABASE_URL"].startswith("postgresql://postgres@/")
        assert values["REDIS_URL"].startswith("unix://")
        redis_dir = Path(values["REDIS_URL"].removeprefix("unix://")).parent
        assert redis_dir.is_dir()
        pids = _stack_pids(proc.pid)
        # PostgreSQL and Redis run detached (not our descendants): find them by their files.
        pgdata = Path(values["DATABASE_URL"].split("host=", 1)[1])
        pg_pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        redis_pid = int((redis_dir / "redis.pid").read_text().strip())
        pids[pg_pid] = "postgres"
        pids[redis_pid] = "redis-server"
        pids.update({p: "postgres child" for p in _children_of(pg_pid)})

        issued = _second_shell(var, "issue_token", "approver")
        assert issued.returncode == 0, issued.stderr
        assert issued.stdout.strip().splitlines()[-1].startswith("aw_")

        started = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)  # the process alone, not its group
        took = _assert_all_gone(pids, started)
        proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, log.read_text()
    assert not redis_dir.exists(), "the temporary Redis directory was left behind"
    assert not (var / "devstack.env").exists()
    print(f"stopped in {took:.1f} s")


def test_load_running_env_fills_only_what_is_unset_and_only_while_the_stack_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTWEB_VAR_DIR", str(tmp_path))
    env = {"DATABASE_URL": "postgresql://db/a", "PATH": "/bin"}
    devstack.write_env_file(
        {"DATABASE_URL": "postgresql://db/b", "REDIS_URL": "redis://r/1", "DEBUG": "1"},
        {"url": "http://127.0.0.1:1/"},
    )
    assert (tmp_path / "devstack.env").stat().st_mode & 0o777 == 0o600
    added = devstack.load_running_env(env)
    assert sorted(added) == ["DEBUG", "REDIS_URL"]
    assert env["DATABASE_URL"] == "postgresql://db/a"  # what is set wins
    assert env["REDIS_URL"] == "redis://r/1"

    # A file left by a stack that died (SIGKILL) is ignored.
    dead = subprocess.Popen(["true"])
    dead.wait()
    text = (tmp_path / "devstack.env").read_text()
    (tmp_path / "devstack.env").write_text(
        text.replace(f"DEVSTACK_PID={os.getpid()}", f"DEVSTACK_PID={dead.pid}")
    )
    assert devstack.load_running_env({}) == []


def test_values_with_spaces_and_quotes_survive_the_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTWEB_VAR_DIR", str(tmp_path))
    tricky = "a b'c\"d $HOME"
    devstack.write_env_file({"SECRET_KEY": tricky}, {})
    env: dict[str, str] = {}
    devstack.load_running_env(env)
    assert env == {"SECRET_KEY": tricky}
