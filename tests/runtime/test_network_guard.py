import socket

import httpx
import pytest


def test_it_refuses_to_resolve_remote_hosts():
    with pytest.raises(AssertionError, match="non-local host"):
        socket.getaddrinfo("api.openai.com", 443)


def test_it_refuses_to_connect_to_remote_addresses():
    with pytest.raises(AssertionError, match="non-local host"):
        socket.create_connection(("203.0.113.7", 443), timeout=1)


def test_httpx_cannot_reach_a_remote_host():
    with pytest.raises(AssertionError):
        httpx.get("https://api.anthropic.com/v1/messages", timeout=1)


def test_localhost_is_allowed(fake_llm):
    r = httpx.post(fake_llm.openai_url + "/chat/completions", json={})
    assert r.status_code == 500  # reached the fake: nothing enqueued
