"""A real SMTP server for tests (aiosmtpd) on a loopback port, in a thread of its own.

    with FakeSmtpServer() as smtp:               # plain text: smtp.url ends in ?tls=off
        env["AGENTWEB_SMTP_URL"] = smtp.url
        smtp.refuse(2)                           # the next 2 messages get 451, then accepted
        smtp.wait_for(1)                         # -> the received messages
        smtp.messages[0].message["Subject"], .envelope_to, .data (the bytes as sent)

``FakeSmtpServer(ca=make_ca(path))`` offers STARTTLS with a certificate of that test CA
(``implicit_tls=True``: TLS from the first byte, for ``smtps://``); ``auth=("u", "p")``
requires a login (over TLS only, as real servers do). ``slow(seconds)`` delays each
answer to DATA; ``hang()`` makes DATA wait until ``release()`` (or the server stops).
Refusals are counted per message (at DATA), with the code you choose (4xx: try again
later, 5xx: permanent).
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.fakes.tls import TestCA

logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs every command


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Received:
    envelope_from: str
    envelope_to: list[str]
    data: bytes  # exactly what the client sent after DATA
    tls: bool  # the session was encrypted (STARTTLS or implicit TLS)
    login: str | None  # who logged in, if anyone
    at: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)  # to compare with stored timestamps

    @property
    def message(self) -> EmailMessage:
        parsed = email.message_from_bytes(self.data, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])

    def text(self) -> str:
        body = self.message.get_body(("plain",))
        return body.get_content().replace("\r\n", "\n") if body is not None else ""

    def html(self) -> str:
        body = self.message.get_body(("html",))
        return body.get_content().replace("\r\n", "\n") if body is not None else ""


class _Handler:
    def __init__(self, server: FakeSmtpServer) -> None:
        self.server = server

    async def handle_EHLO(
        self, smtp: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        with self.server._lock:
            self.server.greetings += 1  # EHLO: a new session (or one after STARTTLS)
        session.host_name = hostname
        return responses

    async def handle_DATA(self, smtp: Any, session: Any, envelope: Any) -> str:
        server = self.server
        received = Received(
            envelope_from=envelope.mail_from,
            envelope_to=list(envelope.rcpt_tos),
            data=bytes(envelope.original_content or envelope.content),
            tls=session.ssl is not None or smtp.transport.get_extra_info("ssl_object") is not None,
            login=session.auth_data.decode() if isinstance(session.auth_data, bytes) else None,
        )
        with server._lock:
            server.attempts += 1
            server.seen.append(received)
            refusal = server._refusals.pop(0) if server._refusals else None
            delay = server._delay
        if delay:
            await asyncio.sleep(delay)
        while server._hung.is_set() and not server._stopping:
            await asyncio.sleep(0.05)  # a client that hangs up cancels this
        if refusal is not None:
            return refusal
        with server._lock:
            server.messages.append(received)
        return "250 2.0.0 OK: queued"


class FakeSmtpServer:
    def __init__(
        self,
        *,
        ca: TestCA | None = None,
        implicit_tls: bool = False,
        auth: tuple[str, str] | None = None,
        offer_starttls: bool = True,
        idle_timeout: float = 300,
    ) -> None:
        self.messages: list[Received] = []  # accepted (answered 250)
        self.seen: list[Received] = []  # every message sent after DATA, refused ones too
        self.attempts = 0  # DATA commands seen, refused ones included
        self.greetings = 0  # EHLO commands seen
        self.ca = ca
        self.implicit_tls = implicit_tls
        self.auth = auth
        self._lock = threading.Lock()
        self._refusals: list[str] = []
        self._delay = 0.0
        self._hung = threading.Event()
        self._stopping = False
        self.port = _free_port()
        kwargs: dict[str, Any] = {"timeout": idle_timeout}  # an idle session is closed
        if ca is not None and implicit_tls:
            kwargs["ssl_context"] = ca.server_context()
        elif ca is not None and offer_starttls:
            kwargs["tls_context"] = ca.server_context()
        if auth is not None:
            kwargs["authenticator"] = self._authenticate
            kwargs["auth_required"] = True
            kwargs["auth_require_tls"] = True
        self._controller = Controller(
            _Handler(self), hostname="127.0.0.1", port=self.port, server_hostname="127.0.0.1",
            **kwargs,
        )  # fmt: skip
        self._controller.start()

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        if isinstance(data, LoginPassword) and self.auth is not None:  # noqa: SIM102
            if (data.login.decode(), data.password.decode()) == self.auth:
                return AuthResult(success=True, auth_data=data.login)
        return AuthResult(success=False, handled=False)

    # -- what a test asks for ------------------------------------------------------------

    @property
    def url(self) -> str:
        """An ``AGENTWEB_SMTP_URL`` for this server."""
        user = f"{self.auth[0]}:{self.auth[1]}@" if self.auth else ""
        if self.implicit_tls:
            return f"smtps://{user}127.0.0.1:{self.port}"
        if self.ca is not None:
            return f"smtp://{user}127.0.0.1:{self.port}"
        return f"smtp://{user}127.0.0.1:{self.port}?tls=off"

    def refuse(self, times: int, reply: str = "451 4.3.0 Try again later") -> None:
        with self._lock:
            self._refusals.extend([reply] * times)

    def slow(self, seconds: float) -> None:
        self._delay = seconds

    def hang(self) -> None:
        self._hung.set()

    def release(self) -> None:
        self._hung.clear()

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.messages) >= count:
                    return list(self.messages)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.messages)} of {count} mails arrived in {timeout}s")

    def to(self, address: str) -> list[Received]:
        with self._lock:
            return [m for m in self.messages if address in m.envelope_to]

    def close(self) -> None:
        self._stopping = True
        self._hung.clear()
        self._controller.stop()

    def __enter__(self) -> FakeSmtpServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
