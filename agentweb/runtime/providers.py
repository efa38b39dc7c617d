"""Provider settings and HTTP transport: base URL, key, one shared httpx.Client,
connect/read timeouts, bounded retries with backoff, and dropping of unsupported params.

Adapters (``openai.py``, ``anthropic.py``) own the wire format and call ``post_json`` /
``stream_json`` here; nothing in this module knows a message format.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from .gateway import (
    ConfigError,
    ModelAuthError,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    current_guard,
)
from .parsing import prune_deep_json

__all__ = ["Provider", "Wire", "iter_sse_data", "provider_from_env"]

log = logging.getLogger(__name__)

Payload = dict[str, Any] | Callable[[], dict[str, Any]]
# how httpx encodes ``json=`` (NaN refused): one encoder for every request body
_ENCODE_BODY = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


class Wire(dict[str, Any]):
    """A part of a request body that an adapter sends again, unchanged, with later calls
    (a message of the run's history, a tool's description): its JSON text is made once
    and kept by the provider. Neither it nor anything it holds is changed once made."""

    __slots__ = ()


#: Wire parts whose text a provider keeps (more: it forgets them all and starts again).
_KNOWN_WIRES = 4096


def _has_wire(items: list[Any]) -> bool:
    return any(isinstance(item, Wire) for item in items)


_RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.PoolTimeout,
)
_DEFAULTS = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_KEY", "https://api.openai.com/v1"),
    "anthropic": ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "https://api.anthropic.com"),
}


@dataclass
class Provider:
    """Where and how to reach one provider. Safe to share between threads."""

    name: str
    base_url: str
    api_key: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    max_retries: int = 3
    backoff: float = 0.5
    backoff_max: float = 8.0
    max_retry_after: float | None = None  # longest Retry-After waited for (None: deadline)
    deadline: float = 120.0  # seconds for one call, retries and waits included
    headers: dict[str, str] = field(default_factory=dict)
    client: httpx.Client | None = None
    _dropped: set[str] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _timeouts: dict[float, httpx.Timeout] = field(default_factory=dict, repr=False)
    _timeout_exts: dict[float, dict[str, float | None]] = field(default_factory=dict, repr=False)
    _targets: dict[str, tuple[httpx.URL, httpx.BaseTransport]] = field(
        default_factory=dict, repr=False
    )
    _header_lists: dict[tuple[tuple[str, str], ...], list[tuple[str, str]]] = field(
        default_factory=dict, repr=False
    )
    _wires: dict[int, tuple[Wire, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")

    # -- client ---------------------------------------------------------------------------

    def http(self) -> httpx.Client:
        if self.client is None:
            with self._lock:
                if self.client is None:
                    self.client = httpx.Client(
                        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
                        follow_redirects=False,
                    )
                    _guard_transports(self.client)
        return self.client

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def _timeout(self, timeout: float | None) -> httpx.Timeout:
        read = self.read_timeout if timeout is None else timeout
        cached = self._timeouts.get(read)
        if cached is None:
            cached = httpx.Timeout(connect=self.connect_timeout, read=read, write=read, pool=read)
            self._timeouts[read] = cached
        return cached

    @property
    def dropped_params(self) -> frozenset[str]:
        """Parameters this provider rejected once; they are no longer sent."""
        return frozenset(self._dropped)

    # -- requests ---------------------------------------------------------------------------

    def post_json(
        self,
        url: str,
        payload: Payload,
        headers: Mapping[str, str],
        *,
        optional: Collection[str] = (),
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST ``payload`` and return the decoded JSON reply, retrying what is retryable.

        ``payload`` may be a function, called for every attempt (after a parameter was
        dropped the adapter may want to shape the request differently)."""
        for attempt in self._attempts(payload, optional):
            try:
                resp = self._post(url, attempt.body, headers, timeout)
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                self._transport_failed(attempt, exc, stalled="no reply within the timeout")
                continue
            if resp.status_code < 300:
                break  # the only way out of the attempts that does not raise
            self._refused(attempt, resp, resp.text)
        try:
            data = json.loads(resp.content)
        except ValueError as exc:
            raise ModelHTTPError(
                self.name, resp.status_code, f"reply is not JSON: {resp.text[:200]}"
            ) from exc
        except RecursionError:
            data = _loads_pruned(resp.text, self.name, resp.status_code)
        if not isinstance(data, dict):
            raise ModelHTTPError(self.name, resp.status_code, "reply is not an object")
        if "error" in data and not data.get("choices") and not data.get("content"):
            raise ModelHTTPError(self.name, resp.status_code, _error_text(data))
        return data

    def _post(
        self, url: str, body: dict[str, Any], headers: Mapping[str, str], timeout: float | None
    ) -> httpx.Response:
        """One POST of a JSON body, read in full. The request is built here and handed to
        the client's transport for the URL (its connection pool, proxies as httpx chose
        them, the guarded connections), without the per-call work of ``Client.post`` that
        a provider call never needs: URL merging, the cookie jar, the auth and redirect
        flows (redirects are not followed either way: a 3xx comes back as it is) and
        httpx's INFO log line. The body is encoded as httpx encodes ``json=``."""
        response = self._send(url, body, headers, timeout)
        try:
            response.read()  # closes the stream: the connection goes back to the pool
        except BaseException:
            response.close()
            raise
        return response

    def _send(
        self, url: str, body: dict[str, Any], headers: Mapping[str, str], timeout: float | None
    ) -> httpx.Response:
        """The POST of ``_post``, its response not read yet (the caller reads or streams
        it, and closes it)."""
        target = self._targets.get(url)
        if target is None:
            parsed = httpx.URL(url)
            target = (parsed, self.http()._transport_for_url(parsed))
            if len(self._targets) > 64:
                self._targets.clear()
            self._targets[url] = target
        content = self._encode(body).encode()
        request = httpx.Request(
            "POST",
            target[0],
            headers=[*self._header_list(headers), ("Content-Length", str(len(content)))],
            content=content,
            extensions={"timeout": self._timeout_ext(timeout)},
        )
        response = target[1].handle_request(request)
        response.request = request
        return response

    def _encode(self, body: dict[str, Any]) -> str:
        """``body`` as ``_ENCODE_BODY`` writes it, the same text; the ``Wire`` items of
        its lists (a run's history, its tools: most of a request, the same at every call
        of a run) written from the text kept for them."""
        kept = [k for k, v in body.items() if isinstance(v, list) and _has_wire(v)]
        if not kept:
            return _ENCODE_BODY(body)
        known = self._wires
        parts = []
        for key, value in body.items():
            if key in kept:
                items = []
                for item in value:
                    if not isinstance(item, Wire):
                        items.append(_ENCODE_BODY(item))
                        continue
                    hit = known.get(id(item))
                    if hit is None or hit[0] is not item:
                        if len(known) >= _KNOWN_WIRES:
                            known.clear()
                        hit = known[id(item)] = (item, _ENCODE_BODY(item))
                    items.append(hit[1])
                text = "[" + ",".join(items) + "]"
            else:
                text = _ENCODE_BODY(value)
            parts.append(_ENCODE_BODY(key) + ":" + text)
        return "{" + ",".join(parts) + "}"

    def _header_list(self, headers: Mapping[str, str]) -> list[tuple[str, str]]:
        """The client's default headers (User-Agent, Accept, Accept-Encoding, Connection)
        under the adapter's, and the JSON content type: made once per set of headers."""
        key = tuple(headers.items())
        merged = self._header_lists.get(key)
        if merged is None:
            own = {k.lower() for k in headers}
            merged = [(k, v) for k, v in self.http().headers.items() if k.lower() not in own]
            merged += [*key, ("Content-Type", "application/json")]
            if len(self._header_lists) > 64:
                self._header_lists.clear()
            self._header_lists[key] = merged
        return merged

    def _timeout_ext(self, timeout: float | None) -> dict[str, float | None]:
        read = self.read_timeout if timeout is None else timeout
        ext = self._timeout_exts.get(read)
        if ext is None:
            ext = self._timeout_exts[read] = self._timeout(timeout).as_dict()
        return ext

    def stream_json(
        self,
        url: str,
        payload: Payload,
        headers: Mapping[str, str],
        *,
        optional: Collection[str] = (),
        timeout: float | None = None,
    ) -> Iterator[dict[str, Any]]:
        """POST ``payload`` and yield the JSON objects of the SSE ``data:`` lines.

        Retries happen only before the first event; a stream that breaks after that
        raises ``ModelHTTPError`` (the caller may already have shown text).
        """
        for attempt in self._attempts(payload, optional):
            started = False
            try:
                # The request as ``_post`` sends it (no Client.stream per-call work).
                with contextlib.closing(self._send(url, attempt.body, headers, timeout)) as resp:
                    if resp.status_code >= 300:
                        self._refused(attempt, resp, resp.read().decode("utf-8", "replace"))
                        continue
                    may_retry = attempt.number < self.max_retries
                    lines = stream_lines(resp.iter_bytes())
                    for event in iter_sse_data(lines):
                        if not started and may_retry and _is_error_event(event):
                            # failed before anything was delivered: as good as a 5xx
                            log.info("%s: stream opened with an error: %.200s", self.name, event)
                            self._retry_or_raise(attempt, None, None, retry=True)
                            break
                        started = True
                        yield event
                    else:
                        _drain(lines)
                        return
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                self._transport_failed(
                    attempt, exc, stalled="stream stalled past the timeout", started=started
                )

    # -- one attempt loop and one retry policy for both kinds of request ----------------------

    def _attempts(self, payload: Payload, optional: Collection[str]) -> Iterator[_Attempt]:
        """The tries of one call, each with the body to send. A try that failed hands its
        ``_Attempt`` to the retry policy (``_transport_failed``, ``_refused``,
        ``_retry_or_raise``), which waits and moves it on, or raises the final error: the
        tries end in a good reply or an exception, never by themselves."""
        attempt = _Attempt(self._call_deadline(), optional)
        while True:
            attempt.body = self._without_dropped(payload, optional)
            yield attempt

    def _transport_failed(
        self, attempt: _Attempt, exc: Exception, *, stalled: str, started: bool = False
    ) -> None:
        """A request that failed below HTTP: on to the next attempt, or the final error.

        Connection problems before anything arrived are retried. A read or write that timed
        out is not (the provider may be working on it), nor is a stream that broke after its
        first event (the caller may already have shown text)."""
        if isinstance(exc, httpx.TimeoutException):
            if started or isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout):
                raise ModelTimeout(f"{self.name}: {stalled}") from exc
        elif isinstance(exc, _RETRY_EXCEPTIONS):
            if started:
                raise ModelHTTPError(self.name, None, f"stream broke: {exc}") from exc
        else:
            raise ModelError(f"{self.name}: request failed: {exc!r}") from exc
        self._retry_or_raise(attempt, exc, None)

    def _refused(self, attempt: _Attempt, resp: httpx.Response, text: str) -> None:
        """A reply with an error status: the same attempt again once a parameter it named
        was dropped (that try does not count), else the next attempt after a wait, or the
        final error."""
        if self._drop_unsupported(resp.status_code, text, attempt.body, attempt.optional):
            return
        self._retry_or_raise(attempt, None, resp, text)

    # -- helpers ------------------------------------------------------------------------------

    def _call_deadline(self) -> float:
        """When a call starting now must be over (monotonic): retries and ``Retry-After``
        waits have to fit before it."""
        until = time.monotonic() + self.deadline
        guard = current_guard()  # the caller's overall deadline, when it set one
        if guard is not None and guard.deadline is not None:
            until = min(until, guard.deadline)
        return until

    def _without_dropped(self, payload: Payload, optional: Collection[str]) -> dict[str, Any]:
        if callable(payload):  # rebuilt per attempt: it may depend on dropped params
            payload = payload()
        if not self._dropped:
            return payload
        return {k: v for k, v in payload.items() if k not in self._dropped or k not in optional}

    def _drop_unsupported(
        self, status: int, text: str, body: dict[str, Any], optional: Collection[str]
    ) -> bool:
        """On a 400/422 naming a parameter we may omit, forget it and ask to try again."""
        if status not in (400, 422) or not optional:
            return False
        named = [k for k in optional if k in body and k in text]
        if not named:
            return False
        with self._lock:
            self._dropped.update(named)
        log.warning("%s: dropping unsupported parameter(s) %s", self.name, ", ".join(named))
        return True

    def _retry_or_raise(
        self,
        attempt: _Attempt,
        exc: Exception | None,
        resp: httpx.Response | None,
        text: str | None = None,
        *,
        retry: bool = False,
    ) -> None:
        """Sleep and move ``attempt`` on to the next number, or raise the final error.

        A ``Retry-After`` is waited for in full when it ends before ``attempt.until`` (the
        call's deadline, monotonic) and within ``max_retry_after``; otherwise the call fails
        now, saying how long the provider asked to wait: retrying sooner would only be
        refused."""
        n, until = attempt.number, attempt.until
        if retry:
            delay = None
        elif resp is not None:
            status = resp.status_code
            detail = text if text is not None else resp.text
            if status in (401, 403):
                raise ModelAuthError(self.name, status, _error_text_raw(detail))
            if status not in _RETRY_STATUSES and status < 500:
                raise ModelHTTPError(self.name, status, _error_text_raw(detail))
            if n >= self.max_retries:
                raise ModelHTTPError(
                    self.name,
                    status,
                    f"{_error_text_raw(detail)} (gave up after {n + 1} attempts)",
                )
            delay = _retry_after(resp.headers.get("retry-after"))
            if delay is None and resp.headers.get("retry-after-ms"):
                delay = (_retry_after(resp.headers["retry-after-ms"]) or 0.0) / 1000
            if delay is not None:
                left = until - time.monotonic()
                why = None
                if delay > left:
                    why = f"more than the {max(left, 0):.0f} s left before the call's deadline"
                elif self.max_retry_after is not None and delay > self.max_retry_after:
                    why = f"more than the {self.max_retry_after:g} s this provider may wait"
                if why is not None:
                    raise ModelHTTPError(
                        self.name,
                        status,
                        f"{_error_text_raw(detail)} (the provider asks to retry after "
                        f"{delay:.1f} s, {why})",
                    )
        else:
            if n >= self.max_retries:
                if isinstance(exc, httpx.TimeoutException):
                    raise ModelTimeout(f"{self.name}: could not connect in time") from exc
                raise ModelError(
                    f"{self.name}: connection failed after {n + 1} attempts: {exc!r}"
                ) from exc
            delay = None
        if delay is None:
            delay = min(self.backoff_max, self.backoff * (2**n))
            delay *= 0.5 + random.random() / 2
            left = until - time.monotonic()
            if left <= 0:
                raise ModelTimeout(f"{self.name}: no reply within the call's deadline")
            delay = min(delay, left)
        log.info("%s: retrying in %.2fs (attempt %d)", self.name, delay, n + 1)
        guard = current_guard()
        if guard is not None:
            guard.sleep(delay)  # a cancel or the deadline ends the wait
        else:
            time.sleep(delay)
        attempt.number = n + 1


@dataclass(slots=True)
class _Attempt:
    """One try of a call: its number (tries after a dropped parameter do not count), the
    call's deadline (monotonic) and the request body of this try."""

    until: float
    optional: Collection[str]
    number: int = 0
    body: dict[str, Any] = field(default_factory=dict)


def _loads_pruned(text: str, name: str, status: int) -> Any:
    """A reply too deep for ``json.loads``: read it with the over-deep part pruned, so
    the call whose arguments were that deep gets an error result instead of a crash."""
    try:
        return json.loads(prune_deep_json(text))
    except (ValueError, RecursionError) as exc:
        raise ModelHTTPError(name, status, "reply is nested too deeply to read") from exc


# -- cancellation: reads that notice a cancel or the deadline -------------------------------


class _GuardedStream(httpcore.NetworkStream):
    """A connection whose reads wake up every ``CallGuard.poll`` seconds to check the
    current call's guard: a cancel (or the overall deadline) raises out of the read, and
    httpcore then closes this connection (the response was not complete)."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        guard = current_guard()
        if guard is None:
            return self._inner.read(max_bytes, timeout)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            guard.check()
            left = None if end is None else end - time.monotonic()
            try:
                return self._inner.read(max_bytes, guard.wait(left))
            except httpcore.ReadTimeout:
                if end is not None and time.monotonic() >= end:
                    raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _GuardedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _GuardedStream(self._inner.connect_tcp(*args, **kwargs))

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _GuardedStream(self._inner.connect_unix_socket(*args, **kwargs))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _guard_transports(client: httpx.Client) -> None:
    """Give the client's connection pools (direct and proxied) guarded connections.

    httpx builds its pools itself (env proxies included); their network backend is
    swapped afterwards, so everything else about the client stays as httpx made it."""
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if pool is not None and backend is not None and not isinstance(backend, _GuardedBackend):
            pool._network_backend = _GuardedBackend(backend)


def _is_error_event(event: dict[str, Any]) -> bool:
    return bool(event.get("error")) and not event.get("choices")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_text(data: Any) -> str:
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)[:500]
    return str(err)[:500]


def _error_text_raw(text: str) -> str:
    try:
        return _error_text(json.loads(text))
    except ValueError:
        return text.strip()[:500] or "(empty body)"


def _drain(lines: Iterator[str], limit: int = 16) -> None:
    """Read what follows a stream's ``[DONE]`` (normally only the end of the chunked
    body), so the connection goes back to the pool instead of being closed and the next
    call skips a new connection (and TLS handshake). More than ``limit`` lines: cut off."""
    try:
        for _ in zip(range(limit), lines, strict=False):
            pass
    except httpx.HTTPError:
        pass  # the reply is complete; the connection is closed as before


def stream_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of an event stream's body (UTF-8), as the SSE grammar ends them: at CRLF,
    LF or CR, and nowhere else. (httpx's ``iter_lines`` follows ``str.splitlines``, which
    also breaks at U+2028, U+2029, U+0085 and a few control characters: a JSON string may
    carry those unescaped, and its chunk was then cut in two and lost.) A CR at the end of
    a network read is held back until the next read tells whether an LF follows."""
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    rest = ""  # the unfinished last line, perhaps with its CR
    for chunk in chunks:
        text = rest + decode(chunk)
        tail = ""
        if text.endswith("\r"):
            text, tail = text[:-1], "\r"
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        rest = lines.pop() + tail
        yield from lines
    text = rest + decode(b"", True)
    if text:
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if not lines[-1]:
            lines.pop()
        yield from lines


def iter_sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Decode server-sent events leniently: comments, ``data:`` with or without a space,
    multi-line data, missing blank lines between events, bare JSON lines, no ``[DONE]``."""
    buf: list[str] = []

    def flush() -> Iterator[dict[str, Any]]:
        if not buf:
            return
        data = "\n".join(buf)
        buf.clear()
        if data.strip() == "[DONE]":
            raise _Done
        try:
            obj = json.loads(data)
        except ValueError:
            log.debug("ignoring non-JSON SSE data: %.200s", data)
            return
        except RecursionError:  # read with the over-deep part pruned (arguments then refused)
            try:
                obj = json.loads(prune_deep_json(data))
            except (ValueError, RecursionError):
                obj = {"error": {"message": "stream data is nested too deeply to read"}}
        if isinstance(obj, dict):
            yield obj

    try:
        for line in lines:
            if not line:
                yield from flush()
            elif line.startswith(":"):
                continue
            elif line.startswith("data:"):
                value = line[5:]
                if value.startswith(" "):
                    value = value[1:]
                if buf and _complete_json(buf):
                    yield from flush()
                buf.append(value)
            elif line.startswith(("event:", "id:", "retry:")):
                continue
            elif line.lstrip().startswith("{"):
                yield from flush()
                buf.append(line)
                yield from flush()
        yield from flush()
    except _Done:
        return


class _Done(Exception):
    pass


def _complete_json(buf: list[str]) -> bool:
    text = "\n".join(buf).strip()
    if text == "[DONE]":
        return True
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def provider_from_env(kind: str, env: Mapping[str, str], **options: Any) -> Provider:
    """Provider settings for ``kind`` ("openai" | "anthropic") from environment variables."""
    url_var, key_var, default_url = _DEFAULTS[kind]
    base_url = (env.get(url_var) or default_url).strip()
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{url_var}: not an http(s) URL: {base_url!r}")
    api_key = (env.get(key_var) or "").strip() or None
    if api_key is None and base_url.rstrip("/") == default_url:
        raise ConfigError(f"{key_var} is not set (needed for {default_url})")
    return Provider(name=kind, base_url=base_url, api_key=api_key, **options)
