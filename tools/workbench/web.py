"""``http_get`` and ``browse``: the web through the address guard."""

from __future__ import annotations

import os
import re
import threading
import time
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

from agentweb.runtime.images import Image, ToolOutput, image_size
from agentweb.runtime.tools import ToolError, tool

from . import netguard

CHROMIUM = "/usr/bin/chromium"
MAX_TEXT_CHARS = 20_000
BROWSE_SECONDS = 30.0
MAX_REQUESTS = 150  # requests one page may make
MAX_PAGE_BYTES = 20 * 1024 * 1024  # everything one page loads
VIEWPORT = {"width": 1280, "height": 800}
_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
# Chromium is started with a proxy that does not exist (no request it makes itself can
# leave the machine, loopback included) and without DNS: every request a page makes is
# answered by the route handler, which fetches it through the guard.
_CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # the worker may be root; the page only ever sees guarded responses
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
]


@tool(risk="low", timeout=netguard.TIMEOUT + 10, expected_duration=1.0)
def http_get(url: str) -> Any:
    """Fetch a public web address with HTTP GET and return its status, type and text
    (the first 2 MiB; images are returned as images). Private and internal addresses are
    refused.

    Args:
        url: An http or https URL, e.g. "https://carrier.example/track?id=1Z999".
    """
    got = netguard.fetch(url)
    result: dict[str, Any] = {
        "url": got.url,
        "status": got.status,
        "content_type": got.content_type,
        "bytes": len(got.body),
    }
    if got.redirects:
        result["redirected_from"] = got.redirects
    if got.truncated:
        result["truncated"] = f"only the first {netguard.MAX_BYTES} bytes were read"
    if got.content_type in _IMAGE_TYPES and not got.truncated:
        dims = image_size(got.body)
        if dims:
            result["width"], result["height"] = dims
        return ToolOutput(result, images=[Image(got.body, got.content_type)])
    text = got.text()
    if got.content_type in ("text/html", "application/xhtml+xml"):
        text = html_text(text)
    result["text"] = text[:MAX_TEXT_CHARS]
    if len(text) > MAX_TEXT_CHARS:
        result["text_truncated"] = f"showing {MAX_TEXT_CHARS} of {len(text)} characters"
    return result


class _Text(HTMLParser):
    _SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    _BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self._SKIP:
            self.skip += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self.skip:
            self.skip -= 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The readable text of an HTML page (no scripts, styles or markup)."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parser.parts))
    return re.sub(r"\s*\n\s*", "\n", text).strip()


_browser_lock = threading.BoundedSemaphore(int(os.environ.get("AGENTWEB_BROWSERS", "2") or 2))


@tool(risk="low", timeout=BROWSE_SECONDS + 30, expected_duration=4.0)
def browse(url: str) -> ToolOutput:
    """Open a public web page in a real browser (scripts run) and return its visible text
    and a screenshot that you get to see. Use it for pages that need JavaScript or when
    the layout matters; http_get is faster for plain pages and files.

    Args:
        url: An http or https URL, e.g. "https://carrier.example/track/1Z999".
    """
    netguard.check_url(url)  # a refused first address fails before a browser starts
    if not os.path.exists(CHROMIUM):
        raise ToolError(f"browse is unavailable: {CHROMIUM} is not installed")
    with _browser_lock:
        return _browse(url)


def _browse(url: str) -> ToolOutput:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    deadline = time.monotonic() + BROWSE_SECONDS
    blocked: list[str] = []
    counts = {"requests": 0, "bytes": 0}
    # A redirect of the page itself is not fulfilled (the browser would fetch its target
    # itself): the navigation is stopped here and made again to the checked target.
    redirected: dict[str, str] = {}
    refused_nav: dict[str, str] = {}

    def handle(route: Any) -> None:
        request = route.request
        if counts["requests"] >= MAX_REQUESTS or time.monotonic() > deadline:
            blocked.append(f"{request.url}: over the page's request or time limit")
            route.abort("blockedbyclient")
            return
        counts["requests"] += 1
        if request.url.startswith(("data:", "blob:", "about:")):
            route.continue_()
            return
        top = request.is_navigation_request() and request.frame.parent_frame is None
        try:
            got = netguard.fetch(
                request.url,
                method=request.method,
                headers={
                    k: v
                    for k, v in request.headers.items()
                    if k.lower() not in ("host", "connection", "accept-encoding", "cookie")
                },
                body=request.post_data_buffer,
                max_bytes=min(netguard.MAX_BYTES, MAX_PAGE_BYTES - counts["bytes"]),
                timeout=max(1.0, min(netguard.TIMEOUT, deadline - time.monotonic())),
                follow_redirects=not top,  # sub-resources: every hop checked in fetch
            )
            location = got.headers.get("location")
            if top and got.status in (301, 302, 303, 307, 308) and location:
                target = urljoin(request.url, location)
                netguard.check_url(target)
                redirected[request.url] = target
                route.abort("aborted")
                return
        except ToolError as exc:
            blocked.append(str(exc))
            if top:
                refused_nav[request.url] = str(exc)
            route.abort("blockedbyclient")
            return
        counts["bytes"] += len(got.body)
        headers = {
            k: v
            for k, v in got.headers.items()
            if k not in ("content-encoding", "content-length", "transfer-encoding", "set-cookie")
        }
        route.fulfill(status=got.status, headers=headers, body=got.body)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=_CHROMIUM_ARGS)
        try:
            context = browser.new_context(
                viewport=VIEWPORT,  # type: ignore[arg-type]
                service_workers="block",
                accept_downloads=False,
                java_script_enabled=True,
            )
            context.route("**/*", handle)
            page = context.new_page()
            status: int | None = None
            target = url
            for _ in range(netguard.MAX_REDIRECTS + 1):
                try:
                    left = max(1.0, deadline - time.monotonic())
                    response = page.goto(target, wait_until="load", timeout=left * 1000)
                    status = response.status if response is not None else None
                    break
                except PlaywrightError as exc:
                    if target in redirected:
                        target = redirected.pop(target)
                        continue
                    if target in refused_nav:
                        raise netguard.Refused(refused_nav[target]) from None
                    message = str(exc).splitlines()[0]
                    if "Timeout" in message:
                        raise ToolError(
                            f"time limit: {url} did not load within {BROWSE_SECONDS:g} s"
                        ) from None
                    raise ToolError(f"browse {url} failed: {message}") from None
            else:
                raise ToolError(f"too many redirects (more than {netguard.MAX_REDIRECTS})")
            page.wait_for_timeout(200)
            text = page.inner_text("body") if page.query_selector("body") else ""
            shot = page.screenshot(type="png", full_page=False)
            result: dict[str, Any] = {
                "url": page.url,
                "status": status,
                "title": page.title(),
                "text": text[:MAX_TEXT_CHARS],
                "screenshot": f"{VIEWPORT['width']}x{VIEWPORT['height']} PNG",
            }
            if len(text) > MAX_TEXT_CHARS:
                result["text_truncated"] = f"showing {MAX_TEXT_CHARS} of {len(text)} characters"
            if blocked:
                result["blocked"] = blocked[:20]
            context.close()
        finally:
            browser.close()
    return ToolOutput(result, images=[Image(shot, "image/png")])
