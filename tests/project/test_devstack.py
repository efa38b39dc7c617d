"""`make run` both ways (embedded services, and the machine's PostgreSQL and Redis), a
second shell's manage.py beside it, and stopping: SIGTERM or SIGINT to the one process we
started must end every process of the stack within 15 s and leave no temporary Redis
directory. Until then it keeps going: Redis killed -9 three times with runs in flight and
a run page open, a worker or beat killed -9 (started again)."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from agentweb import devstack
from tests.conftest import ROOT, free_port, wait_for
from tests.fakes.llm_server import FakeLLMServer
from tests.hardening import outages
from tests.hardening.redis_server import RedisServer
from tests.runs.test_e2e_ws import login

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


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the stack exited with {proc.returncode}:\n{log.read_text()}")
        if text in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} in 180 s:\n{log.read_text()}")


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
    raise AssertionError(f"still running {STOP_WITHIN:.0f} s after the signal: {left}")


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


def _default_sigint() -> None:
    # An IDE starts make with SIGINT at its default; a test run started in the background
    # of a non-interactive shell would pass on SIGINT ignored, and make would keep it so.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_make(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        # -o: never reinstall the (shared) virtualenv from a test.
        return subprocess.Popen(
            ["make", "-s", "-o", ".venv/.installed", "run"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_sigint,  # noqa: PLW1509 - only a signal disposition
        )


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


def _run_until_it_stops(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``devstack run`` where it must stop by itself (a setting or service refused)."""
    return subprocess.run(
        [sys.executable, "-m", "agentweb.devstack", "run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_run_stops_with_that_error_before_starting_anything(tmp_path: Path) -> None:
    port = free_port()
    env = _base_env(tmp_path / "var", free_port())
    env.update(
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/agentweb",
        REDIS_URL="redis://127.0.0.1:6379/0",
    )
    done = _run_until_it_stops(env)
    assert done.returncode == 1
    assert f"cannot connect to PostgreSQL on 127.0.0.1:{port}" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_the_worker_threads_are_spread_over_the_worker_processes() -> None:
    threads = devstack.worker_threads
    assert threads({"AGENTWEB_WORKER_PROCESSES": "2"}) == [4, 4]  # 8 in all by default
    assert threads({"AGENTWEB_WORKER_CONCURRENCY": "5", "AGENTWEB_WORKER_PROCESSES": "2"}) == [3, 2]
    assert threads({"AGENTWEB_WORKER_CONCURRENCY": "2", "AGENTWEB_WORKER_PROCESSES": "3"}) == [1, 1]
    assert threads({"AGENTWEB_WORKER_PROCESSES": "1"}) == [8]
    assert threads({}) == threads({"AGENTWEB_WORKER_PROCESSES": str(min(2, os.cpu_count() or 1))})
    for name, bad in [
        ("AGENTWEB_WORKER_PROCESSES", "0"),
        ("AGENTWEB_WORKER_PROCESSES", "two"),
        ("AGENTWEB_WORKER_CONCURRENCY", "-3"),
        ("AGENTWEB_WORKER_CONCURRENCY", "1.5"),
    ]:
        with pytest.raises(devstack.SetupError, match=name):
            threads({name: bad})
    argv = devstack.stack_argv(
        {"AGENTWEB_WORKER_CONCURRENCY": "5", "AGENTWEB_WORKER_PROCESSES": "2"}, 8000, "s"
    )
    assert list(argv) == ["web", "worker", "worker-2", "beat"]
    assert argv["worker"][argv["worker"].index("-c") + 1] == "3"
    assert argv["worker-2"][argv["worker-2"].index("-c") + 1] == "2"
    assert "-n" not in argv["worker"] and "worker2@%h" in argv["worker-2"]  # distinct names


def test_make_run_refuses_a_bad_worker_setting_before_starting_anything(tmp_path: Path) -> None:
    env = _base_env(tmp_path / "var", free_port())
    env.update(AGENTWEB_WORKER_PROCESSES="none", DATABASE_URL="postgresql://nobody@127.0.0.1:1/x")
    done = _run_until_it_stops(env)
    assert done.returncode == 1
    assert "AGENTWEB_WORKER_PROCESSES must be a whole number of at least 1, not 'none'" in (
        done.stdout
    ), done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_make_run_on_the_machines_services_and_a_signal_to_make_stops_it_all(
    tmp_path: Path, machine_database: str, stack_env: dict[str, str], stop: signal.Signals
) -> None:
    """SIGTERM or SIGINT to the make process alone (an IDE's stop button): make passes the
    SIGINT on to nobody, and waits."""
    if not stack_env.get("REDIS_URL"):
        pytest.skip("REDIS_URL is not set")
    var, port = tmp_path / "var", free_port()
    env = _base_env(var, port)
    env.update(DATABASE_URL=machine_database, REDIS_URL=stack_env["REDIS_URL"])
    log = tmp_path / "make.log"
    make = _start_make(env, log)
    try:
        # Where it runs is said once the web answers: a link followed at once works.
        _wait_for_line(log, "running at", make)
        assert httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=10).status_code == 200
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
        os.kill(make.pid, stop)  # make alone, not its process group
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


def _redis_pid(redis_dir: Path) -> int:
    return int((redis_dir / "redis.pid").read_text().strip())


def _pings(socket_path: str) -> bool:
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
        s.settimeout(0.5)
        s.connect(socket_path)
        s.sendall(b"PING\r\n")
        return s.recv(16).startswith(b"+PONG")
    return False


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("redis_kind", ["embedded", "redis-server"])
def test_make_run_outlives_three_redis_kills_and_crashed_children_until_sigint(
    tmp_path: Path, machine_database: str, redis_kind: str
) -> None:
    """`make run` as a person runs it, its model slow enough for runs to be in flight:
    Redis killed -9 three times (the embedded one, which make run starts again; or a
    redis-server of REDIS_URL, started again empty), then the worker and beat killed -9
    (started again), then SIGINT to make alone stops everything."""
    llm = FakeLLMServer().__enter__()
    llm.responder = outages.script
    llm.record = False
    var, port = tmp_path / "var", free_port()
    env = _base_env(var, port)
    env.update(
        DATABASE_URL=machine_database,
        AGENTWEB_WORKER_CONCURRENCY="8",  # make run's default
        AGENTWEB_LEASE_SECONDS="4",
        AGENTWEB_MODEL="openai:fake-model",
        OPENAI_BASE_URL=llm.openai_url,
        OPENAI_API_KEY="test-key",
        AGENTWEB_STREAM="0",
    )
    server = RedisServer(tmp_path).start() if redis_kind == "redis-server" else None
    if server is not None:
        env["REDIS_URL"] = server.url
    log = tmp_path / "make.log"
    make = _start_make(env, log)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_login_page(port, make, log)
        values = _wait_for_env_file(var)
        issued = _second_shell(var, "issue_token", "operator")
        assert issued.returncode == 0, issued.stderr
        token = issued.stdout.strip().splitlines()[-1]
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        browser = login(url, "operator", env["AGENTWEB_DEMO_PASSWORD"])
        cookie = f"sessionid={browser.cookies['sessionid']}"
        pids = _stack_pids(make.pid)
        worker_pids = [p for p, cmd in pids.items() if " worker " in cmd]
        assert len(worker_pids) == len(devstack.worker_threads(env)) == min(2, os.cpu_count() or 1)

        def create(task: str) -> int:
            created = api.post("/api/runs", json={"task": task})
            assert created.status_code == 201, created.text
            return int(created.json()["id"])

        def stored(run: int) -> int:
            return len(api.get(f"/api/runs/{run}/events?after=0").json()["events"])

        def check_worker() -> None:
            out = log.read_text()
            assert all(_alive(pid) for pid in worker_pids), out[-3000:]
            assert not re.search(r"worker(-[0-9]+)? (exited|was killed)", out), out[-3000:]

        if server is not None:

            def back_after_an_outage() -> None:
                time.sleep(2.0)
                server.start()  # empty

            kill_redis, redis_back = server.kill9, back_after_an_outage
        else:
            socket_path = values["REDIS_URL"].removeprefix("unix://").split("?")[0]
            redis_dir = Path(socket_path).parent

            def kill_redis() -> None:
                os.kill(_redis_pid(redis_dir), signal.SIGKILL)

            def redis_back() -> None:
                wait_for(lambda: _pings(socket_path), 40, 0.1)  # make run starts it again

        stack = outages.Stack(
            create=create,
            status=lambda run: str(api.get(f"/api/runs/{run}").json()["status"]),
            stored=stored,
            kill_redis=kill_redis,
            redis_back=redis_back,
            check_worker=check_worker,
        )
        followed, follower = outages.follow_a_long_run(stack, url, cookie)
        ids, first_kill = outages.outages(stack, followed, follower)
        outages.all_done(stack, followed, follower, ids, first_kill)
        if server is None:
            assert log.read_text().count("the embedded Redis started again") == outages.KILLS

        # A crashed worker (each of them) or beat is started again, with a line saying so.
        for kind in ("worker", "beat"):
            for pid, cmd in _stack_pids(make.pid).items():
                if f" {kind} " not in cmd:
                    continue
                node = re.search(r"-n worker([0-9]+)@", cmd)  # worker-2 ... (devstack names)
                name = f"worker-{node.group(1)}" if node else kind
                os.kill(pid, signal.SIGKILL)
                wait_for(lambda n=name: f"{n} started again" in log.read_text(), 30, 0.2)
                assert f"{name} was killed by SIGKILL" in log.read_text()
        run = create("After the worker and beat were killed")
        wait_for(lambda: stack.status(run) in outages.FINAL, 60, 0.5)
        assert stack.status(run) == "succeeded"
        assert make.poll() is None

        pids = _stack_pids(make.pid)
        if server is None:
            pids[_redis_pid(redis_dir)] = "redis-server"
        started = time.monotonic()
        os.kill(make.pid, signal.SIGINT)  # make alone: an IDE's stop button
        _assert_all_gone(pids, started)
        make.wait(timeout=5)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        if server is not None:
            server.stop()
        llm.__exit__(None, None, None)
    out = log.read_text()
    assert "Unrecoverable error" not in out, out[-3000:]
    assert "make is stopping (SIGINT)" in out, out[-2000:]
