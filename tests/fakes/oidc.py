"""A real OpenID provider for the sign-in tests (``oidc_provider.mjs``: panva's oidc-provider
at the version pinned in ``node_tools.py``) and a client that signs in through it over
HTTP the way a browser does (the provider's own login form, its redirects, the cookies).

    idp = start_idp(tmp, clients=[client("agentweb", "secret", web_url)], accounts={...})
    idp.mode("wrong_audience")     # the token endpoint hands out a bad ID token
    idp.stop()
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from tests.fakes.node_tools import ensure

SCRIPT = Path(__file__).with_name("oidc_provider.mjs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(
    client_id: str, secret: str, *web_urls: str, auth_method: str = "client_secret_basic"
) -> dict[str, Any]:
    """A client registration for agentweb stacks at ``web_urls``."""
    return {
        "client_id": client_id,
        "client_secret": secret,
        "redirect_uris": [f"{url}/oidc/callback/" for url in web_urls],
        "post_logout_redirect_uris": [f"{url}/accounts/login/" for url in web_urls],
        "token_endpoint_auth_method": auth_method,
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
    }


class IdP:
    def __init__(
        self,
        port: int,
        clients: list[dict[str, Any]],
        accounts: dict[str, dict[str, Any]],
        log: Path,
        client_auth_methods: list[str] | None = None,
    ) -> None:
        # The provider answers on "localhost", agentweb on 127.0.0.1: two hosts, so the
        # browser keeps their cookies apart (cookies do not separate ports).
        self.issuer = f"http://localhost:{port}"
        self.port = port
        config: dict[str, Any] = {
            "port": port,
            "issuer": self.issuer,
            "clients": clients,
            "accounts": accounts,
        }
        if client_auth_methods:
            config["client_auth_methods"] = client_auth_methods
        modules = ensure("oidc-provider") / "node_modules"
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["node", str(SCRIPT), str(modules), json.dumps(config)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while "listening on" not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"oidc-provider did not start:\n{self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def mode(self, mode: str) -> None:
        httpx.post(f"{self.issuer}/_test/id_token", json={"mode": mode}).raise_for_status()

    def set_account(self, login: str, **claims: Any) -> None:
        httpx.post(
            f"{self.issuer}/_test/account", json={"login": login, "claims": claims}
        ).raise_for_status()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def start_idp(
    tmp: Path,
    clients: list[dict[str, Any]],
    accounts: dict[str, dict[str, Any]],
    port: int | None = None,
    client_auth_methods: list[str] | None = None,
) -> IdP:
    port = port or free_port()
    return IdP(port, clients, accounts, tmp / f"idp-{port}.log", client_auth_methods)


_FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')


class Browserless:
    """Signs in through the provider's pages over HTTP, as a browser would (one cookie
    jar for agentweb and the provider), stopping wherever a test wants to meddle."""

    def __init__(self, web: str) -> None:
        self.web = web
        self.http = httpx.Client(follow_redirects=False, timeout=15)

    def close(self) -> None:
        self.http.close()

    def start(self, next_url: str = "") -> str:
        """``/oidc/login/`` -> the provider's authorization URL (with state, nonce and
        the PKCE challenge agentweb put in it)."""
        params = {"next": next_url} if next_url else {}
        answer = self.http.get(f"{self.web}/oidc/login/", params=params)
        assert answer.status_code == 302, (answer.status_code, answer.text[:300])
        return str(answer.headers["location"])

    def authorize(self, auth_url: str, login: str) -> str:
        """At the provider: log in as ``login`` (any password); -> the callback URL with
        the code (not opened)."""
        url = auth_url
        for _ in range(10):
            answer = self.http.get(url)
            if answer.status_code in (302, 303):
                url = urljoin(url, answer.headers["location"])
                if url.startswith(self.web):
                    return url
                continue
            assert answer.status_code == 200, (answer.status_code, answer.text[:500])
            action = _FORM_ACTION.search(answer.text)
            assert action, answer.text[:500]
            posted = self.http.post(
                urljoin(url, action.group(1)),
                data={"prompt": "login", "login": login, "password": "any password"},
            )
            assert posted.status_code in (302, 303), (posted.status_code, posted.text[:500])
            url = urljoin(url, posted.headers["location"])
            if url.startswith(self.web):
                return url
        raise AssertionError(f"no way back to agentweb from {auth_url}")

    def callback(self, url: str) -> httpx.Response:
        return self.http.get(url)

    def sign_in(self, login: str, next_url: str = "") -> httpx.Response:
        """The whole round: the callback's answer (302 to the start page when signed in)."""
        return self.callback(self.authorize(self.start(next_url), login))


def query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
