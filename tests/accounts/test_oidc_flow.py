"""Company sign-in against a real OpenID provider (panva's oidc-provider on a loopback port),
over HTTP the way a browser goes: agentweb's /oidc/login/, the provider's login form, the
callback. The browser itself: tests/accounts/test_signin_browser.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from agentweb.accounts.models import OidcIdentity
from tests.accounts.conftest import CLIENT_ID, SSO
from tests.fakes.oidc import Browserless, IdP, query

pytestmark = pytest.mark.e2e


@pytest.fixture
def person(sso: SSO, transactional_db: None) -> Any:
    people: list[Browserless] = []

    def make(web: str | None = None) -> Browserless:
        people.append(Browserless(web or sso.web))
        return people[-1]

    yield make
    for p in people:
        p.close()


def roles(username: str) -> set[str]:
    return set(User.objects.get(username=username).groups.values_list("name", flat=True))


def refused(who: Browserless, answer: httpx.Response, what: str) -> str:
    """The refusal page naming ``what``, and ``who`` is not signed in."""
    assert answer.status_code in (400, 502), (answer.status_code, answer.text[:300])
    assert 'id="signin-refused"' in answer.text
    assert f'data-what="{what}"' in answer.text, answer.text
    after = who.http.get(f"{who.web}/tickets/")
    assert after.status_code == 302 and after.headers["location"].startswith("/accounts/login/")
    return answer.text


def test_it_signs_in_creates_the_account_and_sets_roles(sso: SSO, person: Any) -> None:
    alice = person()
    auth_url = alice.start()
    params = query(auth_url)
    assert auth_url.startswith(f"{sso.idp.issuer}/auth?")
    assert params["client_id"] == CLIENT_ID and params["response_type"] == "code"
    assert params["code_challenge_method"] == "S256" and len(params["code_challenge"]) == 43
    assert len(params["state"]) >= 32 and len(params["nonce"]) >= 32
    assert params["redirect_uri"] == f"{sso.web}/oidc/callback/"
    assert set(params["scope"].split()) == {"openid", "email", "profile", "groups"}
    answer = alice.callback(alice.authorize(auth_url, "alice"))
    assert answer.status_code == 302 and answer.headers["location"] == "/tickets/"
    user = User.objects.get(username="alice")
    assert user.email == "alice@example.com" and not user.has_usable_password()
    assert roles("alice") == {"operator"}
    identity = OidcIdentity.objects.get(user=user)
    assert identity.issuer == sso.idp.issuer and identity.subject == "alice"
    tickets = alice.http.get(f"{sso.web}/tickets/")
    assert tickets.status_code == 200 and "alice" in tickets.text


def test_roles_follow_the_groups_at_every_sign_in(sso: SSO, person: Any, fresh_idp: IdP) -> None:
    assert person().sign_in("bob").headers["location"] == "/approvals/"
    assert roles("bob") == {"approver", "operator"}
    fresh_idp.set_account("bob", email="bob@example.com", groups=["it-admins"])
    assert person().sign_in("bob").status_code == 302
    assert roles("bob") == {"admin"}
    fresh_idp.set_account("bob", email="bob@new.example.com", groups=[])
    assert person().sign_in("bob").status_code == 302
    assert roles("bob") == set()
    assert User.objects.get(username="bob").email == "bob@new.example.com"
    assert User.objects.filter(username="bob").count() == 1


def test_a_person_without_a_mapped_group_gets_no_role(sso: SSO, person: Any) -> None:
    carol = person()
    assert carol.sign_in("carol").status_code == 302
    assert roles("carol") == set()
    page = carol.http.get(f"{sso.web}/tickets/")
    assert page.status_code == 403 and "ask an administrator" in page.text


def test_next_is_kept_through_the_round(sso: SSO, person: Any) -> None:
    answer = person().sign_in("alice", next_url="/runs/")
    assert answer.headers["location"] == "/runs/"


def test_a_tampered_state_is_refused(sso: SSO, person: Any) -> None:
    alice = person()
    callback = alice.authorize(alice.start(), "alice")
    state = query(callback)["state"]
    text = refused(alice, alice.callback(callback.replace(state, state[:-4] + "xxxx")), "state")
    assert "state" in text
    assert not User.objects.filter(username="alice").exists()


def test_a_replayed_code_is_refused(sso: SSO, person: Any) -> None:
    alice = person()
    first = alice.authorize(alice.start(), "alice")
    assert alice.callback(first).status_code == 302
    # The same answer again in another browser: no sign-in of its own started there.
    other = person()
    refused(other, other.callback(first), "state")
    # Someone who got hold of the answer plays its code under a state of their own:
    # the provider refuses the used code.
    mallory = person()
    theirs = query(mallory.start())["state"]
    replay = first.replace(query(first)["state"], theirs)
    text = refused(mallory, mallory.callback(replay), "code")
    assert "already used" in text and "invalid_grant" in text
    # Alice's own browser, the same answer once more: its state was used up.
    again = alice.callback(first)
    assert again.status_code == 400 and 'data-what="state"' in again.text


@pytest.mark.parametrize(
    ("mode", "what", "says"),
    [
        ("wrong_audience", "audience", "issued for another application"),
        ("foreign_key", "signature", "signature does not verify"),
        ("wrong_issuer", "issuer", "another issuer"),
        ("wrong_nonce", "nonce", "nonce"),
    ],
)
def test_a_bad_id_token_is_refused(
    sso: SSO, person: Any, fresh_idp: IdP, mode: str, what: str, says: str
) -> None:
    fresh_idp.mode(mode)
    alice = person()
    text = refused(alice, alice.sign_in("alice"), what)
    assert says in text
    assert not User.objects.filter(username="alice").exists()


def test_an_error_from_the_provider_is_shown(sso: SSO, person: Any) -> None:
    alice = person()
    state = query(alice.start())["state"]
    text = refused(
        alice,
        alice.callback(
            f"{sso.web}/oidc/callback/?error=access_denied&error_description=no+thanks"
            f"&state={state}"
        ),
        "idp",
    )
    assert "access_denied: no thanks" in text


def test_a_superuser_is_not_taken_over(sso: SSO, person: Any) -> None:
    User.objects.create_superuser("alice", "root@example.com", "local-pass-123")
    alice = person()
    text = refused(alice, alice.sign_in("alice"), "account")
    assert "superuser" in text
    assert not OidcIdentity.objects.exists()


def test_a_local_account_of_the_same_name_moves_to_company_sign_in(sso: SSO, person: Any) -> None:
    local = User.objects.create_user("alice", "old@example.com", "local-pass-123")
    assert person().sign_in("alice").status_code == 302
    assert OidcIdentity.objects.get().user == local
    assert User.objects.get(pk=local.pk).email == "alice@example.com"


def test_logout_ends_the_session_at_the_provider(sso: SSO, person: Any) -> None:
    alice = person()
    assert alice.sign_in("alice").status_code == 302
    page = alice.http.get(f"{sso.web}/tickets/")
    token = page.text.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    out = alice.http.post(
        f"{sso.web}/accounts/logout/",
        data={"csrfmiddlewaretoken": token},
        headers={"Referer": f"{sso.web}/tickets/"},
    )
    assert out.status_code == 302
    end = out.headers["location"]
    params = query(end)
    assert end.startswith(f"{sso.idp.issuer}/session/end?")
    assert params["post_logout_redirect_uri"] == f"{sso.web}/accounts/login/"
    assert params["client_id"] == CLIENT_ID and params["id_token_hint"].count(".") == 2
    assert alice.http.get(f"{sso.web}/tickets/").status_code == 302  # signed out here
    # The provider asks to confirm; yes sends the browser back to our login page.
    confirm = alice.http.get(end)
    assert confirm.status_code == 200 and "sign-out" in confirm.text.lower()
    action = confirm.text.split('action="')[1].split('"')[0]
    xsrf = confirm.text.split('name="xsrf" value="')[1].split('"')[0]
    done = alice.http.post(httpx.URL(end).join(action), data={"xsrf": xsrf, "logout": "yes"})
    assert done.status_code in (302, 303)
    assert done.headers["location"] == f"{sso.web}/accounts/login/"
    # The provider's session is gone too: signing in again shows its login form.
    again = alice.http.get(alice.start())
    assert again.status_code in (302, 303) and "/interaction/" in again.headers["location"]
