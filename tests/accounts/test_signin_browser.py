"""Signing in with the company's identity provider in Chromium, as a person does: the
login page, the provider's own login form, back in agentweb with a role, logging out at
both ends; a tampered answer and a provider that is down. Screenshots in /tmp/shots
(signin-*.png)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.accounts.conftest import SSO, oidc_env
from tests.browser.conftest import ARGS, CHROMIUM, SHOTS
from tests.conftest import free_port, start_web
from tests.fakes.oidc import IdP

pytestmark = [
    pytest.mark.browser,
    pytest.mark.e2e,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is not installed"),
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - the browser tests' own loop

    SHOTS.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        # Playwright's sync API runs an event loop in this thread; the ORM calls between
        # browser steps are plain blocking calls. Allowed here only.
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as p:
            instance = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            yield instance
            instance.close()


@pytest.fixture
def page(chromium: Any, transactional_db: None) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], errors


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"signin-{name}.png"), full_page=True)


def sign_in_at_the_provider(page: Any, login: str) -> None:
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "correct horse battery staple")
    page.click("button[type=submit]")


def test_a_person_signs_in_and_out_through_the_company_provider(sso: SSO, page: Any) -> None:
    page.goto(f"{sso.web}/accounts/login/")
    button = page.get_by_role("link", name="Sign in with Example Corp")
    assert button.is_visible() and page.locator("#id_password").is_visible()
    shot(page, "1-login")
    button.click()
    page.wait_for_url(re.compile(r"^http://localhost:\d+/interaction/"))
    assert page.locator("input[name=login]").is_visible()
    shot(page, "2-provider-login")
    sign_in_at_the_provider(page, "alice")
    page.wait_for_url(f"{sso.web}/tickets/")
    assert page.locator(".usermenu-toggle").inner_text().startswith("alice")
    assert "operator" in page.locator(".usermenu-toggle").inner_text()
    shot(page, "3-signed-in")
    assert User.objects.get(username="alice").groups.filter(name="operator").exists()

    page.locator(".usermenu-toggle").click()
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(re.compile(r"^http://localhost:\d+/session/end"))
    shot(page, "4-provider-sign-out")
    page.get_by_role("button", name="Yes, sign me out").click()
    page.wait_for_url(f"{sso.web}/accounts/login/")
    shot(page, "5-signed-out")
    # Both sessions are over: "Sign in" asks for the provider's password again.
    page.get_by_role("link", name="Sign in with Example Corp").click()
    page.wait_for_url(re.compile(r"^http://localhost:\d+/interaction/"))
    assert page.locator("input[name=login]").is_visible()


def test_a_tampered_answer_is_refused_with_a_page_that_says_why(sso: SSO, page: Any) -> None:
    # Playwright's routes see only the first request of a redirect chain, and the answer
    # comes back as a redirect from the provider: Chromium's own Fetch domain sees every
    # hop, and changes the state on its way to agentweb.
    cdp = page.context.new_cdp_session(page)
    tampered: list[str] = []

    def on_paused(event: dict[str, Any]) -> None:
        url = re.sub(r"state=[^&]+", "state=forged-by-someone", event["request"]["url"])
        tampered.append(url)
        cdp.send("Fetch.continueRequest", {"requestId": event["requestId"], "url": url})

    cdp.on("Fetch.requestPaused", on_paused)
    cdp.send("Fetch.enable", {"patterns": [{"urlPattern": "*/oidc/callback/?*"}]})
    page.goto(f"{sso.web}/oidc/login/")
    sign_in_at_the_provider(page, "alice")
    page.wait_for_url(re.compile(r".*/oidc/callback/"))
    assert tampered and "state=forged-by-someone" in tampered[0]
    refusal = page.locator("#signin-refused")
    assert refusal.get_attribute("data-what") == "state"
    assert "does not belong to a sign-in started in this browser" in refusal.inner_text()
    shot(page, "6-refused-state")
    page.goto(f"{sso.web}/tickets/")
    assert "/accounts/login/" in page.url  # not signed in
    assert not User.objects.filter(username="alice").exists()


@pytest.mark.parametrize(
    ("mode", "what", "says"),
    [
        ("wrong_audience", "audience", "issued for another application"),
        ("foreign_key", "signature", "signature does not verify"),
    ],
)
def test_an_id_token_for_another_audience_or_key_is_refused_in_the_browser(
    sso: SSO, fresh_idp: IdP, page: Any, mode: str, what: str, says: str
) -> None:
    fresh_idp.mode(mode)  # the provider's token endpoint answers with such a token
    page.goto(f"{sso.web}/accounts/login/")
    page.get_by_role("link", name="Sign in with Example Corp").click()
    page.wait_for_url(re.compile(r"^http://localhost:\d+/interaction/"))
    sign_in_at_the_provider(page, "alice")
    page.wait_for_url(re.compile(r".*/oidc/callback/"))
    refusal = page.locator("#signin-refused")
    assert refusal.get_attribute("data-what") == what
    assert says in refusal.inner_text()
    shot(page, f"9-refused-{what}")
    page.goto(f"{sso.web}/tickets/")
    assert "/accounts/login/" in page.url  # not signed in
    assert not User.objects.filter(username="alice").exists()


def test_the_login_page_when_passwords_are_off_and_on_a_phone(sso: SSO, chromium: Any) -> None:
    context = chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        phone = context.new_page()
        phone.goto(f"{sso.web_sso_only}/accounts/login/")
        assert phone.locator("#id_password").count() == 0
        assert phone.get_by_role("link", name="Sign in with Example Corp").is_visible()
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        phone.screenshot(path=str(SHOTS / "signin-7-sso-only-390.png"), full_page=True)
    finally:
        context.close()


def test_the_login_page_says_when_the_provider_is_down(
    stack_env: dict[str, str], tmp_path: Path, page: Any
) -> None:
    web, url = start_web(oidc_env(stack_env, f"http://localhost:{free_port()}"), tmp_path)
    try:
        page.goto(f"{url}/accounts/login/")
        notice = page.locator("#sso-unavailable")
        assert notice.is_visible()
        assert "Sign-in with Example Corp is unavailable right now" in notice.inner_text()
        shot(page, "8-provider-down")
        page.get_by_role("link", name="Sign in with Example Corp").click()
        page.wait_for_url(f"{url}/accounts/login/")  # asked again, still down: back here
        assert page.locator("#sso-unavailable").is_visible()
    finally:
        web.stop()
