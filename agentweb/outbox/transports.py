"""How each channel sends one delivery: ``send(delivery)`` returns when the other side took
it, or raises ``DeliveryError`` with a reason a page may show.

One function per channel (healthchecks' ``Transport.notify()``), no retries here: the
outbox decides what happens after a failure. Certificates are checked against the
system's CAs (``ssl.create_default_context``, which honours ``SSL_CERT_FILE``).
"""

from __future__ import annotations

import contextlib
import os
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from email.utils import parseaddr

import httpx
from django.conf import settings

from agentweb.outbox.config import SmtpConfig
from agentweb.outbox.models import Delivery
from agentweb.signing import agentweb_headers

USER_AGENT = "agentweb-outbox/1"
#: At most this much of an answer's body is read (and a little of it kept in the reason).
MAX_ANSWER_BYTES = 4096


class DeliveryError(Exception):
    """The other side did not take it. ``permanent``: trying again cannot help (a mail
    server refused the recipient with a 5xx), so the outbox gives up at once."""

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason[:1000]
        self.permanent = permanent


def timeout() -> float:
    return float(settings.AGENTWEB_DELIVERY_TIMEOUT_SECONDS)


_contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_clients = threading.local()


def tls_context() -> ssl.SSLContext:
    """The system's CAs, with ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set: one context per
    process and setting (loading the CAs costs tens of milliseconds)."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _contexts.get(key)
    if context is None:
        context = _contexts[key] = ssl.create_default_context()
    return context


def _client() -> httpx.Client:
    """This thread's HTTP client (a lane thread posts to one host: its connections are
    kept for the next delivery), made again when the timeout or the CAs changed."""
    limit = timeout()
    context = tls_context()
    key = (limit, id(context))
    client: httpx.Client | None = getattr(_clients, "client", None)
    if client is None or getattr(_clients, "key", None) != key:
        if client is not None:
            client.close()
        client = httpx.Client(
            timeout=httpx.Timeout(limit, connect=min(limit, 5.0)),
            follow_redirects=False,
            # TCP_NODELAY: a request's head and body go out at once (Nagle's algorithm would
            # hold the body until the receiver's delayed ACK of the head, 40 ms on Linux).
            transport=httpx.HTTPTransport(
                verify=context,
                limits=httpx.Limits(max_keepalive_connections=4, keepalive_expiry=30),
                socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            ),
        )
        _clients.client, _clients.key = client, key
    return client


# --- email ----------------------------------------------------------------------------


#: A lane thread keeps its SMTP connection this long for the next mail (a mail server
#: session costs a TCP and often a TLS handshake, EHLO and a login).
SMTP_IDLE_SECONDS = 30.0
_smtp = threading.local()


def _drop_smtp() -> None:
    client = getattr(_smtp, "client", None)
    _smtp.client = None
    if client is not None:
        with contextlib.suppress(Exception):  # closing a broken connection may fail too
            client.close()


def _smtp_client(smtp: SmtpConfig, where: str) -> smtplib.SMTP:
    """This thread's session with the mail server: the kept one if it still answers
    RSET, else a new one (EHLO, STARTTLS when offered, login)."""
    key = (smtp, timeout(), id(tls_context()))
    client: smtplib.SMTP | None = getattr(_smtp, "client", None)
    if client is not None:
        fresh = time.monotonic() - getattr(_smtp, "used", 0.0) < SMTP_IDLE_SECONDS
        if fresh and getattr(_smtp, "key", None) == key:
            try:
                client.rset()
                return client
            except (smtplib.SMTPException, OSError):
                pass
        _drop_smtp()
    if smtp.implicit_tls:
        client = smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=timeout(), context=tls_context())
    else:
        client = smtplib.SMTP(smtp.host, smtp.port, timeout=timeout())
    try:
        client.ehlo()
        if not smtp.implicit_tls and smtp.tls:
            if client.has_extn("starttls"):
                client.starttls(context=tls_context())
                client.ehlo()
            elif smtp.username:
                raise DeliveryError(
                    f"{where} does not offer STARTTLS: the password is not sent in clear "
                    "(use smtps://, or a server that offers STARTTLS)"
                )
        if smtp.username:
            client.login(smtp.username, smtp.password)
    except BaseException:
        client.close()
        raise
    _smtp.client, _smtp.key = client, key
    return client


def send_email(delivery: Delivery) -> None:
    smtp = settings.AGENTWEB_SMTP
    if smtp is None:
        raise DeliveryError("mail is off: AGENTWEB_SMTP_URL is not set")
    message = delivery.body.encode("utf-8")
    _, sender = parseaddr(_header(delivery.body, "From"))
    where = f"{smtp.host}:{smtp.port}"
    try:
        try:
            client = _smtp_client(smtp, where)
            client.sendmail(sender, [delivery.target], message)
            _smtp.used = time.monotonic()
        except BaseException:
            _drop_smtp()  # a session that failed is not used again
            raise
    except DeliveryError:
        raise
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        text = "; ".join(f"{code} {_text(msg)}" for code, msg in exc.recipients.values())
        raise DeliveryError(
            f"{where} refused the recipient: {text}", permanent=all(c >= 500 for c in codes)
        ) from None
    except smtplib.SMTPDataError as exc:
        raise DeliveryError(
            f"{where} refused the message: {exc.smtp_code} {_text(exc.smtp_error)}",
            permanent=exc.smtp_code >= 500,
        ) from None
    except smtplib.SMTPResponseException as exc:
        raise DeliveryError(f"{where} answered {exc.smtp_code} {_text(exc.smtp_error)}") from None
    except ssl.SSLCertVerificationError as exc:
        raise DeliveryError(f"{where}: certificate not trusted ({exc.verify_message})") from None
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(f"{where}: {_oserror(exc)}") from None


def _header(message: str, name: str) -> str:
    """A header of the stored message (the head only; the body is not parsed)."""
    head = message.split("\r\n\r\n", 1)[0]
    prefix = name.lower() + ":"
    lines = head.split("\r\n")
    for i, line in enumerate(lines):
        if line.lower().startswith(prefix):
            value = line[len(prefix) :]
            for cont in lines[i + 1 :]:  # folded continuation lines
                if not cont[:1].isspace():
                    break
                value += cont
            return value.strip()
    return ""


def _text(raw: bytes | str) -> str:
    return (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw))[:300]


def _oserror(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | smtplib.SMTPServerDisconnected) and not str(exc):
        return type(exc).__name__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# --- HTTP: our signed webhooks and Slack -----------------------------------------------


def post_signed(delivery: Delivery) -> None:
    """POST the JSON body signed with ``X-Agentweb-Signature`` (``agentweb.signing``)."""
    body = delivery.body.encode("utf-8")
    headers = {"X-Agentweb-Delivery": delivery.delivery_id}
    if delivery.secret:
        headers.update(agentweb_headers(delivery.secret, body))
    _post(delivery.target, body, headers, _where(delivery.target))


def post_slack(delivery: Delivery) -> None:
    """POST Slack JSON to an incoming webhook or an interaction's ``response_url``; Slack
    answers 200 ``ok`` when it took it."""
    # The path of a Slack webhook URL is its secret: reasons name the host only.
    where = f"Slack ({httpx.URL(delivery.target).host})"
    _post(delivery.target, delivery.body.encode("utf-8"), {}, where)


def _post(url: str, body: bytes, extra: dict[str, str], where: str) -> None:
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **extra}
    limit = timeout()
    try:
        with _client().stream("POST", url, content=body, headers=headers) as answer:
            head = b""
            for chunk in answer.iter_bytes():
                head += chunk
                if len(head) >= MAX_ANSWER_BYTES:
                    break
    except httpx.TimeoutException as exc:
        raise DeliveryError(
            f"{where}: no answer within {limit:g} s ({type(exc).__name__})"
        ) from None
    except httpx.HTTPError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise DeliveryError(
                f"{where}: certificate not trusted ({cause.verify_message})"
            ) from None
        raise DeliveryError(f"{where}: {type(exc).__name__}: {exc}") from None
    if 200 <= answer.status_code < 300:
        return
    text = head[:200].decode("utf-8", "replace").strip()
    raise DeliveryError(
        f"{where} answered HTTP {answer.status_code}" + (f": {text}" if text else "")
    )


def _where(url: str) -> str:
    """The URL without query or credentials."""
    parts = httpx.URL(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.host}{port}{parts.path}"


SENDERS: dict[str, Callable[[Delivery], None]] = {
    Delivery.Channel.EMAIL: send_email,
    Delivery.Channel.WEBHOOK: post_signed,
    Delivery.Channel.SLACK: post_slack,
}
