"""Bad configuration stops start-up with a message naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOOD = {
    "DATABASE_URL": "postgresql://u:p@127.0.0.1:5432/agentweb",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "DEBUG": "1",
}
PROD = {
    "DATABASE_URL": "postgresql://u:p@127.0.0.1:5432/agentweb",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "DEBUG": "0",
    "SECRET_KEY": "k" * 30 + "-production-secret-key-for-tests-0123456789",
    "ALLOWED_HOSTS": "agentweb.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://agentweb.example.com",
}


def start(overrides: dict[str, str | None], *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTWEB_", "OPENAI_", "ANTHROPIC_", "DJANGO_"))
    }
    env.update(GOOD)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    argv = list(args) or ["check"]
    return subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"DEBUG": "maybe"}, "DEBUG"),
        ({"DATABASE_URL": "mysql://x@y/z"}, "DATABASE_URL"),
        ({"DATABASE_URL": None}, "DATABASE_URL"),
        ({"DATABASE_URL": "postgresql://u@h:notaport/db"}, "DATABASE_URL"),
        ({"REDIS_URL": "http://localhost"}, "REDIS_URL"),
        ({"REDIS_URL": None}, "REDIS_URL"),
        ({"AGENTWEB_MODEL": "gpt-4o"}, "AGENTWEB_MODEL"),
        ({"AGENTWEB_MODEL": "openai:"}, "AGENTWEB_MODEL"),
        ({"AGENTWEB_STREAM": "sometimes"}, "AGENTWEB_STREAM"),
        ({"AGENTWEB_TOOLS": " , "}, "AGENTWEB_TOOLS"),
        ({"AGENTWEB_LEASE_SECONDS": "soon"}, "AGENTWEB_LEASE_SECONDS"),
        ({"AGENTWEB_PRICES": "gpt=cheap"}, "AGENTWEB_PRICES"),
        ({"AGENTWEB_HTTP_ALLOW": "127.0.0.1,intranet"}, "AGENTWEB_HTTP_ALLOW"),
        ({"AGENTWEB_WORKSPACE_RETENTION_DAYS": "soon"}, "AGENTWEB_WORKSPACE_RETENTION_DAYS"),
        ({"AGENTWEB_MODEL": "openai:gpt-4o", "OPENAI_API_KEY": None}, "OPENAI_API_KEY"),
        ({"AGENTWEB_MODEL": "anthropic:claude", "ANTHROPIC_API_KEY": None}, "ANTHROPIC_API_KEY"),
        ({"AGENTWEB_TOOLS": "tools.nonexistent"}, "AGENTWEB_TOOLS"),
        ({"OPENAI_BASE_URL": "localhost:8080/v1"}, "OPENAI_BASE_URL"),
        ({"CSRF_TRUSTED_ORIGINS": "example.com"}, "CSRF_TRUSTED_ORIGINS"),
        ({"DEBUG": "0", "SECRET_KEY": None, "ALLOWED_HOSTS": "x"}, "SECRET_KEY"),
        ({"DEBUG": "0", "SECRET_KEY": "short", "ALLOWED_HOSTS": "x"}, "SECRET_KEY"),
        ({**PROD, "ALLOWED_HOSTS": ""}, "ALLOWED_HOSTS"),
    ],
)
def test_it_names_the_bad_variable(overrides: dict[str, str | None], variable: str) -> None:
    result = start(overrides)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert variable in last, last


def test_it_starts_with_good_settings() -> None:
    result = start({})
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_it_passes_the_deploy_check_in_production() -> None:
    result = start(PROD, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNINGS" not in result.stderr + result.stdout


def test_it_reads_a_secret_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("f" * 60 + "\n")
    result = start({**PROD, "SECRET_KEY": None, "SECRET_KEY_FILE": str(secret)})
    assert result.returncode == 0, result.stderr
