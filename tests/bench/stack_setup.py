"""What the whole-stack benchmarks set up alike: an environment of their own (a fresh
database beside DATABASE_URL's, a queue, a fake OpenAI-compatible model), Django on it
with the demo seeded, and API tokens for the demo's people."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx

from tests.bench.bench_stack import bench_database


def stack_env(
    suffix: str, *, tools: str = "tests.runs.sample_tools", **extra: str
) -> dict[str, str]:
    """The benchmark's environment, also set in ``os.environ`` for this process: a fresh
    database named DATABASE_URL's name + ``suffix``, replies not streamed, the
    ``openai:bench`` model (its base URL is the fake server's, set by the caller)."""
    env = dict(os.environ)
    env.update(
        DATABASE_URL=bench_database(os.environ["DATABASE_URL"], suffix),
        DEBUG="1",
        AGENTWEB_TOOLS=tools,
        AGENTWEB_STREAM="0",
        AGENTWEB_MODEL="openai:bench",
        OPENAI_API_KEY="bench",
        AGENTWEB_DEMO_PASSWORD="bench-password",
        AGENTWEB_QUEUE=f"bench{suffix}-{os.getpid()}",
        LOG_LEVEL="WARNING",
    )
    env.update(extra)
    os.environ.update(env)
    return env


def seeded_django() -> None:
    """Django on the benchmark's database, migrated, with the demo's people and profiles."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentweb.settings")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    with open(os.devnull, "w") as quiet:
        call_command("seed_demo", stdout=quiet)


def tokens(*usernames: str) -> list[str]:
    """A fresh API token for each of the demo's people named."""
    from django.contrib.auth import get_user_model

    from agentweb.accounts.models import ApiToken

    users: Any = get_user_model().objects
    return [ApiToken.issue(users.get(username=name)) for name in usernames]


def make_run_stack(env: dict[str, str], tmp: Path) -> tuple[dict[str, Any], str]:
    """Web, worker and beat started as ``make run`` starts them (``devstack.stack_argv``),
    the web on a free port, their logs in ``tmp``: the processes by name and the web's URL
    (``wait_for_web`` waits until it answers)."""
    from agentweb.devstack import stack_argv
    from tests.conftest import Proc, free_port

    port = free_port()
    argv = stack_argv(env, port, str(tmp / "beat-schedule"))
    procs = {name: Proc(name, argv[name], env, tmp / f"{name}.log") for name in argv}
    return procs, f"http://127.0.0.1:{port}"


def wait_for_web(url: str, web: Any) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/accounts/login/", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if web.proc.poll() is not None:
            raise SystemExit(f"web exited early:\n{web.output()}")
        time.sleep(0.2)
    raise SystemExit("web not ready in 90 s")
