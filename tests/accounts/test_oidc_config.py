"""Company sign-in: what the configuration and the provider's discovery may say, an issuer
that is down when agentweb starts, and passwords switched off (AGENTWEB_LOCAL_LOGIN=0)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured

from agentweb.accounts import oidc
from agentweb.accounts.models import ROLE_ADMIN, ROLE_APPROVER, ROLE_OPERATOR
from agentweb.env import ROLES, issuer_url, parse_roles_map
from tests.accounts.conftest import CLIENT_ID, SECRET, SSO, oidc_env
from tests.conftest import ROOT, free_port, start_web
from tests.fakes.oidc import Browserless, client, start_idp

ISSUER = "https://login.example.com"


def discovery(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "issuer": ISSUER,
        "authorization_endpoint": f"{ISSUER}/auth",
        "token_endpoint": f"{ISSUER}/token",
        "jwks_uri": f"{ISSUER}/jwks",
        "userinfo_endpoint": f"{ISSUER}/me",
        "end_session_endpoint": f"{ISSUER}/logout",
        "response_types_supported": ["code", "id_token"],
        "scopes_supported": ["openid", "email", "groups"],
    }
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not None}


def test_it_reads_what_discovery_allows() -> None:
    found = oidc.parse_discovery(discovery(), ISSUER)
    assert found.client_auth == "client_secret_basic"  # the default when none is listed
    assert found.algorithms == ("RS256",)
    assert found.scope == "openid email profile groups"
    post = oidc.parse_discovery(
        discovery(token_endpoint_auth_methods_supported=["private_key_jwt", "client_secret_post"]),
        ISSUER,
    )
    assert post.client_auth == "client_secret_post"
    es = oidc.parse_discovery(
        discovery(id_token_signing_alg_values_supported=["HS256", "ES256", "none"]), ISSUER + "/"
    )
    assert es.algorithms == ("ES256",)
    nested = oidc.parse_discovery(discovery(scopes_supported=["openid"]), ISSUER, "realm.roles")
    assert nested.scope == "openid email profile"


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"issuer": "https://evil.example.com"}, "names the issuer 'https://evil.example.com'"),
        ({"token_endpoint": None}, "no token_endpoint"),
        ({"response_types_supported": ["id_token"]}, "authorization code flow"),
        ({"code_challenge_methods_supported": ["plain"]}, "PKCE with S256"),
        ({"token_endpoint_auth_methods_supported": ["private_key_jwt"]}, "client_secret_post"),
        ({"id_token_signing_alg_values_supported": ["HS256"]}, "signs ID tokens only with HS256"),
    ],
)
def test_a_discovery_we_cannot_work_with_is_named(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(oidc.Unavailable) as caught:
        oidc.parse_discovery(discovery(**changes), ISSUER)
    assert says in str(caught.value)


def test_roles_from_claims() -> None:
    mapping = parse_roles_map("staff=operator, leads=approver,leads=operator,cn=it=admin")
    assert mapping == {
        "staff": ("operator",),
        "leads": ("approver", "operator"),
        "cn=it": ("admin",),  # the last "=" separates the role
    }
    assert oidc.roles_from_claims({"groups": ["leads", "other"]}, "groups", mapping) == {
        "approver",
        "operator",
    }
    assert oidc.roles_from_claims({"groups": "staff"}, "groups", mapping) == {"operator"}
    assert oidc.roles_from_claims({"groups": {"staff": 1}}, "groups", mapping) == set()
    assert oidc.roles_from_claims(
        {"realm_access": {"roles": ["staff"]}}, "realm_access.roles", mapping
    ) == {"operator"}
    assert oidc.roles_from_claims({}, "groups", mapping) == set()
    assert (ROLE_OPERATOR, ROLE_APPROVER, ROLE_ADMIN) == ROLES


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("staff", "look like 'idp-group=role'"),
        ("staff=boss", "'boss' (for 'staff') is not a role"),
        ("=operator", "look like"),
    ],
)
def test_a_bad_roles_map_is_named(value: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        parse_roles_map(value)
    assert "OIDC_ROLES_MAP" in str(caught.value) and says in str(caught.value)


def test_issuer_urls() -> None:
    assert issuer_url("https://login.example.com/realms/x") == "https://login.example.com/realms/x"
    assert issuer_url("http://localhost:9000") == "http://localhost:9000"
    for bad in ("http://login.example.com", "ftp://x", "https://x/?a=1", "login.example.com"):
        with pytest.raises(ImproperlyConfigured, match="OIDC_ISSUER"):
            issuer_url(bad)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OIDC_ISSUER": "https://login.example.com"}, "OIDC_CLIENT_ID must be set"),
        ({"OIDC_ISSUER": "http://login.example.com", "OIDC_CLIENT_ID": "a"}, "OIDC_ISSUER must"),
        ({"OIDC_CLIENT_ID": "a"}, "OIDC_CLIENT_ID is set but OIDC_ISSUER is not"),
        ({"AGENTWEB_LOCAL_LOGIN": "0"}, "AGENTWEB_LOCAL_LOGIN=0 needs OIDC_ISSUER"),
        (
            {
                "OIDC_ISSUER": "https://login.example.com",
                "OIDC_CLIENT_ID": "a",
                "OIDC_CLIENT_SECRET": "b",
                "OIDC_ROLES_MAP": "staff=root",
            },
            "OIDC_ROLES_MAP: 'root'",
        ),
    ],
)
def test_bad_configuration_stops_start_up_naming_the_variable(
    stack_env: dict[str, str], env: dict[str, str], says: str
) -> None:
    environ = {k: v for k, v in stack_env.items() if not k.startswith("OIDC_")}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert says in done.stderr, done.stderr[-2000:]


# --- an issuer that is down when agentweb starts ----------------------------------------


@pytest.mark.e2e
def test_an_unreachable_issuer_does_not_stop_the_stack(
    stack_env: dict[str, str], tmp_path: Path, transactional_db: None
) -> None:
    idp_port, web_port = free_port(), free_port()
    web_url = f"http://127.0.0.1:{web_port}"
    env = oidc_env(stack_env, f"http://localhost:{idp_port}")
    web, url = start_web(env, tmp_path, web_port)  # the provider is not there yet
    idp = None
    try:
        page = httpx.get(f"{url}/accounts/login/")
        assert page.status_code == 200
        assert 'id="sso-unavailable"' in page.text
        assert "Sign-in with Example Corp is unavailable right now" in page.text
        assert "cannot be reached" in page.text
        assert 'id="id_password"' in page.text  # passwords still work
        back = httpx.get(f"{url}/oidc/login/?next=/runs/")
        assert back.status_code == 302
        assert back.headers["location"] == "/accounts/login/?next=%2Fruns%2F"
        # The provider comes up (one that takes only client_secret_post): the next click
        # asks its discovery again and the sign-in goes through, the secret in the body.
        idp = start_idp(
            tmp_path,
            clients=[client(CLIENT_ID, SECRET, web_url, auth_method="client_secret_post")],
            accounts={"dana": {"email": "dana@example.com", "groups": ["support-agents"]}},
            port=idp_port,
            client_auth_methods=["client_secret_post"],
        )
        dana = Browserless(url)
        try:
            assert dana.sign_in("dana").headers.get("location") == "/tickets/"
        finally:
            dana.close()
        assert User.objects.get(username="dana").groups.filter(name="operator").exists()
        assert 'id="sso-unavailable"' not in httpx.get(f"{url}/accounts/login/").text
        assert "unavailable: http://localhost" in web.output()  # logged, once per try
    finally:
        web.stop()
        if idp is not None:
            idp.stop()


# --- AGENTWEB_LOCAL_LOGIN=0 ---------------------------------------------------------------


@pytest.mark.e2e
def test_without_local_login_only_company_sign_in_and_superusers_remain(
    sso: SSO, transactional_db: None
) -> None:
    User.objects.create_user("olga", "olga@example.com", "local-pass-123")
    User.objects.create_superuser("root", "root@example.com", "root-pass-123")
    with httpx.Client(base_url=sso.web_sso_only) as http:
        page = http.get("/accounts/login/")
        assert page.status_code == 200
        assert 'id="id_password"' not in page.text and "Sign in with Example Corp" in page.text
        token = http.cookies["csrftoken"]
        posted = http.post(
            "/accounts/login/",
            data={"username": "olga", "password": "local-pass-123", "csrfmiddlewaretoken": token},
        )
        assert posted.status_code == 403 and "Password sign-in is switched off" in posted.text
        assert http.get("/tickets/").status_code == 302  # not signed in
    with httpx.Client(base_url=sso.web_sso_only) as http:  # a password at /admin/: no
        assert _admin_login(http, "olga", "local-pass-123") is False
    with httpx.Client(base_url=sso.web_sso_only) as http:  # a superuser's: yes
        assert _admin_login(http, "root", "root-pass-123") is True
    person = Browserless(sso.web_sso_only)
    try:
        assert person.sign_in("alice").headers["location"] == "/tickets/"
    finally:
        person.close()


def _admin_login(http: httpx.Client, username: str, password: str) -> bool:
    http.get("/admin/login/")
    answer = http.post(
        "/admin/login/?next=/admin/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": http.cookies["csrftoken"],
            "next": "/admin/",
        },
    )
    return answer.status_code == 302 and answer.headers["location"] == "/admin/"
