"""The address guard of http_get (and browse): resolve, check, connect to the checked address."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from agentweb.runtime.execution import Invocation, ToolResult, run_tools
from agentweb.runtime.tools import ToolContext
from tools.workbench import netguard
from tools.workbench.web import http_get

from .conftest import PNG_1x1, Site


def get(url: str) -> ToolResult:
    ctx = ToolContext(call_id="c1", run_id="1")
    return run_tools([Invocation(http_get, http_get.parse({"url": url}), ctx, 30)])[0]


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "is a loopback address"),
        ("127.8.9.10", "is a loopback address"),
        ("::1", "is a loopback address"),
        ("10.1.2.3", "is a private address"),
        ("172.16.0.1", "is a private address"),
        ("192.168.1.1", "is a private address"),
        ("fd12:3456::1", "is a private address"),
        ("169.254.169.254", "is a cloud metadata address"),
        ("fd00:ec2::254", "is a cloud metadata address"),
        ("169.254.1.1", "is a link-local address"),
        ("fe80::1", "is a link-local address"),
        ("224.0.0.1", "is a multicast address"),
        ("ff02::1", "is a multicast address"),
        ("0.0.0.0", "is the unspecified address"),
        ("::", "is the unspecified address"),
        ("100.64.0.1", "is not a public address"),
        ("::ffff:127.0.0.1", "maps to 127.0.0.1, which is a loopback address"),
        ("::ffff:169.254.169.254", "maps to 169.254.169.254, which is a cloud metadata address"),
        ("64:ff9b::a00:1", "maps to 10.0.0.1, which is a private address"),
        ("2002:7f00:1::", "maps to 127.0.0.1, which is a loopback address"),
    ],
)
def test_it_refuses_internal_addresses(address: str, why: str) -> None:
    ip = ipaddress.ip_address(address)
    assert netguard.refusal(ip) == why
    host = f"[{address}]" if ip.version == 6 else address
    res = get(f"http://{host}:8080/latest/meta-data")
    assert not res.ok
    assert res.error is not None and res.error.startswith(f"refused: {ip} {why}")


def test_public_addresses_pass() -> None:
    for address in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "1.1.1.1"):
        assert netguard.refusal(ipaddress.ip_address(address)) is None


def test_a_local_server_is_refused_without_the_allow_list(site: Site) -> None:
    site.write("index.html", "<p>hello</p>")
    res = get(site.url("/index.html"))
    assert not res.ok and res.error == "refused: 127.0.0.1 is a loopback address"
    assert site.hits == []  # refused before connecting


def test_a_host_name_is_checked_after_resolution(site: Site) -> None:
    res = get(f"http://localhost:{site.port}/")
    assert not res.ok
    assert "is a loopback address (resolved from 'localhost')" in (res.error or "")
    for spelling in ("2130706433", "127.1", "0x7f.0.0.1"):  # 127.0.0.1 in other spellings
        res = get(f"http://{spelling}:{site.port}/")
        assert res.error == "refused: 127.0.0.1 is a loopback address", spelling
    assert site.hits == []


def test_allowed_addresses_are_fetched_with_limits(site: Site, monkeypatch) -> None:
    monkeypatch.setenv("AGENTWEB_HTTP_ALLOW", "127.0.0.1")
    site.write("page.html", "<html><script>x()</script><h1>Parcel</h1><p>delivered</p></html>")
    res = get(site.url("/page.html"))
    assert res.ok, res.error
    assert res.result["status"] == 200 and res.result["text"] == "Parcel\ndelivered"
    site.write("big.bin", b"a" * (netguard.MAX_BYTES + 5000))
    res = get(site.url("/big.bin"))
    assert res.result["bytes"] == netguard.MAX_BYTES and "truncated" in res.result
    site.write("dot.png", PNG_1x1)
    res = get(site.url("/dot.png"))
    assert res.ok and [i.data for i in res.images] == [PNG_1x1]


def test_the_connection_goes_to_the_checked_address(site: Site, monkeypatch) -> None:
    """A second DNS answer (rebinding) cannot redirect the connection: the guard resolves
    once and connects to that address with the name only in the Host header."""
    monkeypatch.setenv("AGENTWEB_HTTP_ALLOW", "127.0.0.1")
    site.write("index.html", "ok")
    answers = iter(["127.0.0.1", "10.9.9.9"])
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host == "tracking.test":
            ip = next(answers)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    res = get(f"http://tracking.test:{site.port}/index.html")
    assert res.ok, res.error
    assert res.result["text"] == "ok"


def test_every_redirect_is_checked(site: Site, monkeypatch) -> None:
    monkeypatch.setenv("AGENTWEB_HTTP_ALLOW", "127.0.0.1/32")
    site.write("final.html", "final")
    site.redirects["/hop"] = "/final.html"
    site.redirects["/to-metadata"] = "http://169.254.169.254/latest/meta-data/"
    site.redirects["/to-other-loopback"] = f"http://127.0.0.2:{site.port}/final.html"
    ok = get(site.url("/hop"))
    assert ok.ok and ok.result["text"] == "final" and ok.result["redirected_from"]
    res = get(site.url("/to-metadata"))
    assert not res.ok and res.error == "refused: 169.254.169.254 is a cloud metadata address"
    res = get(site.url("/to-other-loopback"))
    assert not res.ok and res.error == "refused: 127.0.0.2 is a loopback address"


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://x", "javascript:alert(1)"]
)
def test_only_http_and_https(url: str) -> None:
    res = get(url)
    assert not res.ok and "only http and https" in (res.error or "")


def test_credentials_in_urls_are_refused() -> None:
    res = get("http://user:pw@93.184.216.34/")
    assert not res.ok and "user name or password" in (res.error or "")


def test_a_bad_allow_list_is_reported() -> None:
    from tools.workbench.config import parse_allow

    with pytest.raises(ValueError, match="AGENTWEB_HTTP_ALLOW: 'nope'"):
        parse_allow("127.0.0.1, nope")


def test_a_server_that_never_answers_hits_the_time_limit(monkeypatch) -> None:
    monkeypatch.setenv("AGENTWEB_HTTP_ALLOW", "127.0.0.1")
    server = socket.create_server(("127.0.0.1", 0))  # accepts (backlog) but never replies
    port = server.getsockname()[1]
    try:
        with pytest.raises(netguard.ToolError, match="time limit"):
            netguard.fetch(f"http://127.0.0.1:{port}/", timeout=1.0)
    finally:
        server.close()
