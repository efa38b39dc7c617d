"""Runtime tests: no database, no network beyond localhost."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agentweb.runtime.anthropic import AnthropicModel
from agentweb.runtime.openai import OpenAIChatModel
from agentweb.runtime.providers import Provider
from tests.fakes.llm_server import FakeLLMServer

_LOCAL_NAMES = {"localhost", "localhost.localdomain", ""}


def _is_local(host: Any) -> bool:
    if not isinstance(host, str):
        return True
    if host in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _no_remote_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any test that tries to reach a non-local host."""
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            raise AssertionError(f"test tried to reach non-local host {address!r}")
        return real_connect(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode()
        if not _is_local(host):
            raise AssertionError(f"test tried to resolve non-local host {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    try:
        yield server
    finally:
        server.close()


def fast_provider(name: str, base_url: str, **options: Any) -> Provider:
    settings: dict[str, Any] = {
        "api_key": "test-key",
        "connect_timeout": 2.0,
        "read_timeout": 5.0,
        "max_retries": 2,
        "backoff": 0.01,
        "backoff_max": 0.05,
        "max_retry_after": 0.2,
    }
    settings.update(options)
    return Provider(name=name, base_url=base_url, **settings)


@pytest.fixture
def openai_model(fake_llm: FakeLLMServer) -> Iterator[OpenAIChatModel]:
    provider = fast_provider("openai", fake_llm.openai_url)
    yield OpenAIChatModel("fake-model", provider)
    provider.close()


@pytest.fixture
def anthropic_model(fake_llm: FakeLLMServer) -> Iterator[AnthropicModel]:
    provider = fast_provider("anthropic", fake_llm.base_url)
    yield AnthropicModel("claude-fake", provider)
    provider.close()
