"""`make run`'s console at its default level (LOG_LEVEL=WARNING for its children) prints
what went wrong with us, not a WARNING line for every 4xx a visitor met (DESIGN §16)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import start_web

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("level", "quiet"), [("WARNING", True), ("INFO", False)])
def test_4xx_answers_print_no_warning_at_make_runs_level(
    stack_env: dict[str, str], tmp_path: Path, level: str, quiet: bool
) -> None:
    proc, url = start_web({**stack_env, "LOG_LEVEL": level}, tmp_path)
    try:
        for path, status in [
            ("/no/such/page/", 404),
            ("/api/runs", 401),
            ("/api/nothing", 404),
            ("/healthz/nope", 404),
        ]:
            assert httpx.get(url + path, timeout=10).status_code == status, path
        assert httpx.post(url + "/accounts/login/", timeout=10).status_code == 403  # CSRF
    finally:
        proc.stop()
    warnings = [line for line in proc.output().splitlines() if " WARNING " in line]
    if quiet:
        assert warnings == []
    else:  # at INFO they are told, as before (JSON logs count on them)
        assert any("Not Found: /no/such/page/" in line for line in warnings), warnings
