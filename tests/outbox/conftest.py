from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentweb.outbox.config import parse_smtp_url
from tests.fakes.smtp_server import FakeSmtpServer


@pytest.fixture
def smtp(settings: Any) -> Iterator[FakeSmtpServer]:
    """A real SMTP server on loopback, and the settings that send mail to it."""
    with FakeSmtpServer() as server:
        settings.AGENTWEB_SMTP = parse_smtp_url(server.url)
        settings.AGENTWEB_MAIL_FROM = "Agentweb <agentweb@example.test>"
        yield server


@pytest.fixture
def fast(settings: Any) -> None:
    """Network waits of half a second, so tests that hit a timeout stay short."""
    settings.AGENTWEB_DELIVERY_TIMEOUT_SECONDS = 0.5
