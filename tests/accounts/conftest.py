"""Stacks signing in through a real OpenID provider (tests/fakes/oidc.py).

``sso``: one provider (client_secret_basic) and two agentweb web processes registered
with it: ``sso.web`` with passwords allowed, ``sso.web_sso_only`` with
``AGENTWEB_LOCAL_LOGIN=0``. The provider's accounts: alice (support-agents: operator),
bob (support-leads: approver), carol (no group that maps to a role).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Proc, free_port, start_web
from tests.fakes import node_tools
from tests.fakes.oidc import IdP, client, start_idp

CLIENT_ID = "agentweb"
SECRET = "s3cret/with+odd=chars&more"  # form-encoded in the Basic header (RFC 6749 §2.3.1)
ROLES_MAP = "support-agents=operator,support-leads=approver,support-leads=operator,it-admins=admin"
ACCOUNTS: dict[str, dict[str, Any]] = {
    "alice": {"email": "alice@example.com", "name": "Alice A.", "groups": ["support-agents"]},
    "bob": {"email": "bob@example.com", "groups": ["support-leads", "all-staff"]},
    "carol": {"email": "carol@example.com", "groups": ["all-staff"]},
}


def oidc_env(stack_env: dict[str, str], issuer: str, **extra: str) -> dict[str, str]:
    env = dict(stack_env)
    env.update(
        OIDC_ISSUER=issuer,
        OIDC_CLIENT_ID=CLIENT_ID,
        OIDC_CLIENT_SECRET=SECRET,
        OIDC_ROLES_MAP=ROLES_MAP,
        OIDC_DISPLAY_NAME="Example Corp",
    )
    env.update(extra)
    return env


@dataclass
class SSO:
    idp: IdP
    web: str
    web_sso_only: str
    procs: list[Proc]


@pytest.fixture(scope="session")
def sso(stack_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSO]:
    try:
        node_tools.ensure("oidc-provider")
    except node_tools.Unavailable as exc:
        pytest.skip(str(exc))
    tmp: Path = tmp_path_factory.mktemp("sso")
    port_a, port_b = free_port(), free_port()
    urls = [f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"]
    idp = start_idp(tmp, clients=[client(CLIENT_ID, SECRET, *urls)], accounts=dict(ACCOUNTS))
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    procs: list[Proc] = []
    try:
        web_a, url_a = start_web(oidc_env(stack_env, idp.issuer), tmp / "a", port_a)
        procs.append(web_a)
        web_b, url_b = start_web(
            oidc_env(stack_env, idp.issuer, AGENTWEB_LOCAL_LOGIN="0"), tmp / "b", port_b
        )
        procs.append(web_b)
        yield SSO(idp, url_a, url_b, procs)
    finally:
        for proc in procs:
            proc.stop()
        idp.stop()


@pytest.fixture
def fresh_idp(sso: SSO) -> Iterator[IdP]:
    """The provider, handing out its own ID tokens again after the test, with the
    accounts as they were."""
    yield sso.idp
    sso.idp.mode("normal")
    for login, claims in ACCOUNTS.items():
        sso.idp.set_account(login, **claims)
