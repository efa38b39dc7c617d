from typing import Any

import pytest
from django.db import connections


@pytest.fixture(autouse=True)
def _short_lived_connections() -> None:
    """Consumers read the database from pool threads; close each thread's connection
    after its read so the test database can be dropped at the end."""
    connections.settings["default"]["CONN_MAX_AGE"] = 0


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
