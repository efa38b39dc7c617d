from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections


@pytest.fixture(autouse=True)
def _close_thread_connections() -> Iterator[None]:
    """Consumers read the database from worker threads; with persistent connections those
    threads would keep sessions open and block dropping the test database."""
    conf = connections.settings["default"]
    before = conf.get("CONN_MAX_AGE")
    conf["CONN_MAX_AGE"] = 0
    yield
    conf["CONN_MAX_AGE"] = before


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
