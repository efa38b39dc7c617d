import contextlib
import threading
from collections.abc import Iterator

import pytest
from django.db import connection, connections


@pytest.fixture(autouse=True)
def _short_lived_connections() -> None:
    """Consumers read the database from pool threads; close each thread's connection
    after its read so the test database can be dropped at the end."""
    connections.settings["default"]["CONN_MAX_AGE"] = 0


@pytest.fixture(scope="session", autouse=True)
def _close_read_pool_connections(django_db_setup: None) -> Iterator[None]:
    """Close the database connections the consumers' read threads hold, before the test
    database is dropped."""
    yield
    from agentweb.web.consumers import READ_POOL

    size = READ_POOL._max_workers
    barrier = threading.Barrier(size)

    def close() -> None:
        connection.close()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=2)  # one task per thread

    for future in [READ_POOL.submit(close) for _ in range(size)]:
        future.result()
