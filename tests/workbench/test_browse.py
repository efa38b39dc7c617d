"""browse: the system Chromium; every request the page makes passes the address guard."""

from __future__ import annotations

import os
import time

import pytest

from agentweb.runtime.execution import Invocation, ToolResult, run_tools
from agentweb.runtime.images import image_size
from agentweb.runtime.tools import ToolContext
from tools.workbench.web import browse

from .conftest import PNG_1x1, Site

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/chromium"), reason="/usr/bin/chromium is not installed"
)


def open_page(url: str) -> ToolResult:
    ctx = ToolContext(call_id="c1", run_id="5")
    return run_tools([Invocation(browse, browse.parse({"url": url}), ctx, 90)])[0]


def test_it_refuses_a_local_page_without_starting_a_browser(site: Site) -> None:
    site.write("index.html", "<p>hi</p>")
    started = time.monotonic()
    res = open_page(site.url("/index.html"))
    assert not res.ok and res.error == "refused: 127.0.0.1 is a loopback address"
    assert site.hits == [] and time.monotonic() - started < 5


def test_every_request_of_the_page_is_guarded(site: Site, monkeypatch) -> None:
    monkeypatch.setenv("AGENTWEB_HTTP_ALLOW", "127.0.0.1/32")
    site.write("dot.png", PNG_1x1)
    site.write(
        "page.html",
        f"""<html><head><title>Probe</title></head><body><h1>Tracking</h1>
        <img src="/dot.png"><img src="http://10.1.2.3/x.png">
        <img src="http://[::ffff:169.254.169.254]/latest">
        <script src="http://127.0.0.2:{site.port}/evil.js"></script>
        <script>
          fetch('http://169.254.169.254/latest/meta-data/').catch(() => {{}});
          try {{ new WebSocket('ws://127.0.0.1:{site.port}/ws-probe'); }} catch (e) {{}}
          document.body.insertAdjacentHTML('beforeend', '<p>script ran</p>');
        </script></body></html>""",
    )
    res = open_page(site.url("/page.html"))
    assert res.ok, res.error
    assert res.result["title"] == "Probe"
    assert "Tracking" in res.result["text"] and "script ran" in res.result["text"]
    blocked = "\n".join(res.result["blocked"])
    assert "refused: 10.1.2.3 is a private address" in blocked
    assert "refused: 127.0.0.2 is a loopback address" in blocked
    assert "refused: 169.254.169.254 is a cloud metadata address" in blocked
    assert "maps to 169.254.169.254" in blocked
    time.sleep(0.5)
    assert "/dot.png" in site.hits  # allowed sub-resources are fetched (through the guard)
    assert "/ws-probe" not in site.hits  # Chromium reaches nothing by itself
    assert "/evil.js" not in site.hits
    [image] = res.images
    assert image.media_type == "image/png" and image_size(image.data) == (1280, 800)


def test_redirects_are_followed_hop_by_hop_through_the_guard(site: Site, monkeypatch) -> None:
    monkeypatch.setenv("AGENTWEB_HTTP_ALLOW", "127.0.0.1")
    site.write("final.html", "<title>Final</title><p>arrived</p>")
    site.redirects["/hop"] = "/final.html"
    site.redirects["/away"] = "http://169.254.169.254/latest/meta-data/"
    res = open_page(site.url("/hop"))
    assert res.ok, res.error
    assert res.result["url"].endswith("/final.html") and "arrived" in res.result["text"]
    res = open_page(site.url("/away"))
    assert not res.ok
    assert res.error == "refused: 169.254.169.254 is a cloud metadata address"
