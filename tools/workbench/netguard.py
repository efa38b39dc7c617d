"""The address guard of ``http_get`` and ``browse``.

A URL's host is resolved first; every address it resolves to must be public (not
loopback, private, link-local, multicast, reserved or a cloud metadata address, IPv4 or
IPv6, IPv4-mapped included) unless ``AGENTWEB_HTTP_ALLOW`` lists it. The connection then
goes to the checked address (the host name only travels as the Host header and the TLS
server name), so a second DNS answer cannot point it elsewhere. Redirects are followed
by hand and each hop is checked again.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from agentweb.runtime.tools import ToolError

from . import config

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA = {
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack …
    ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
MAX_BYTES = 2 * 1024 * 1024
TIMEOUT = 15.0
MAX_REDIRECTS = 5
USER_AGENT = "agentweb-workbench/1 (+https://github.com/)"
_REDIRECTS = {301, 302, 303, 307, 308}


class Refused(ToolError):
    """A URL or address the guard does not allow; the message names it and why."""


def refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` may not be reached (None: a public address)."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is None and ip in _NAT64:
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None:
            why = refusal(inner)
            return f"maps to {inner}, which {why}" if why else None
    if ip in METADATA:
        return "is a cloud metadata address"
    if ip.is_loopback:
        return "is a loopback address"
    if ip.is_link_local:
        return "is a link-local address"
    if ip.is_multicast:
        return "is a multicast address"
    if ip.is_unspecified:
        return "is the unspecified address"
    if ip.is_private:
        return "is a private address"
    if ip.is_reserved:
        return "is a reserved address"
    if not ip.is_global:
        return "is not a public address"
    return None


def check_ip(ip: IPAddress) -> None:
    if any(ip in net for net in config.http_allow()):
        return
    why = refusal(ip)
    if why is not None:
        raise Refused(f"refused: {ip} {why}")


def resolve(host: str, port: int) -> IPAddress:
    """The address to connect to for ``host``: every address it resolves to is checked."""
    try:
        literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is None and re.fullmatch(r"[0-9a-fA-FxX.]+", host):
        try:  # the other spellings of IPv4 (2130706433, 127.1, 0x7f.0.0.1)
            literal = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            literal = None
    if literal is not None:
        check_ip(literal)
        return literal
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(f"refused: the host {host!r} does not resolve ({exc})") from None
    addresses: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise Refused(f"refused: the host {host!r} has no address")
    for ip in addresses:
        try:
            check_ip(ip)
        except Refused as exc:
            raise Refused(f"{exc} (resolved from {host!r})") from None
    return addresses[0]


@dataclass(frozen=True, slots=True)
class Target:
    url: str  # as asked for
    connect_url: str  # with the checked address in place of the host
    host_header: str
    host: str
    ip: IPAddress


def check_url(url: str) -> Target:
    """Check ``url`` (scheme, host, every resolved address); raises ``Refused``."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise Refused(f"refused: {url!r} is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused(f"refused: {url!r}: only http and https URLs are allowed")
    if parts.username or parts.password:
        raise Refused(f"refused: {url!r}: URLs with a user name or password are not allowed")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise Refused(f"refused: {url!r} has no host")
    port = port or (443 if scheme == "https" else 80)
    ip = resolve(host, port)
    literal = f"[{ip}]" if ip.version == 6 else str(ip)
    netloc = literal if parts.port is None else f"{literal}:{port}"
    connect = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
    host_header = parts.netloc.rsplit("@", 1)[-1]
    return Target(url.strip(), connect, host_header, host, ip)


@dataclass(slots=True)
class Fetched:
    url: str  # the final URL after redirects
    status: int
    headers: dict[str, str]
    body: bytes
    truncated: bool
    redirects: list[str] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def text(self) -> str:
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip("\"'")
        try:
            return self.body.decode(charset, "replace")
        except LookupError:
            return self.body.decode("utf-8", "replace")


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context per process (building one costs tens of milliseconds)."""
    return ssl.create_default_context()


def _client(timeout: float) -> httpx.Client:
    # trust_env=False: no proxy or certificate settings from the worker's environment
    return httpx.Client(timeout=timeout, trust_env=False, follow_redirects=False, verify=_tls())


def fetch(
    url: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    max_bytes: int = MAX_BYTES,
    timeout: float = TIMEOUT,
    follow_redirects: bool = True,
) -> Fetched:
    """One guarded request (redirects followed hop by hop, each checked); the body is
    kept to ``max_bytes`` and the whole exchange to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    redirects: list[str] = []
    current = url
    with _client(timeout) as client:
        while True:
            target = check_url(current)
            send_headers = {"User-Agent": USER_AGENT, **dict(headers or {})}
            send_headers = {k: v for k, v in send_headers.items() if k.lower() != "host"}
            send_headers["Host"] = target.host_header
            request = client.build_request(
                method,
                target.connect_url,
                headers=send_headers,
                content=body,
                extensions={"sni_hostname": target.host},
            )
            try:
                response = client.send(request, stream=True)
            except httpx.TimeoutException:
                raise ToolError(
                    f"time limit: {current} did not answer within {timeout:g} s"
                ) from None
            except httpx.HTTPError as exc:
                raise ToolError(f"request to {current} failed: {exc}") from None
            try:
                location = response.headers.get("location")
                if follow_redirects and response.status_code in _REDIRECTS and location:
                    if len(redirects) >= MAX_REDIRECTS:
                        raise ToolError(f"too many redirects (more than {MAX_REDIRECTS})")
                    redirects.append(current)
                    current = urljoin(current, location)
                    if response.status_code in (301, 302, 303) and method != "HEAD":
                        method, body = "GET", None
                    continue
                data = bytearray()
                truncated = False
                for chunk in response.iter_bytes():
                    data.extend(chunk)
                    if len(data) > max_bytes:
                        del data[max_bytes:]
                        truncated = True
                        break
                    if time.monotonic() > deadline:
                        raise ToolError(f"time limit: {current} took longer than {timeout:g} s")
                return Fetched(
                    url=current,
                    status=response.status_code,
                    headers={k.lower(): v for k, v in response.headers.items()},
                    body=bytes(data),
                    truncated=truncated,
                    redirects=redirects,
                )
            finally:
                response.close()
