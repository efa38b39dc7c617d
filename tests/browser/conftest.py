"""Playwright against the live stack (Daphne + a real Celery worker) with the system
Chromium. Skipped only when /usr/bin/chromium is not installed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path("/tmp/shots")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if CHROMIUM.exists():
        return
    skip = pytest.mark.skip(reason=f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")  # module: Playwright's loop must end before async tests run
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    # Playwright's sync API runs an event loop in this thread; the ORM calls these tests
    # make between browser steps are plain blocking calls. Allowed here only.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            instance = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            yield instance
            instance.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


class Person:
    """One logged-in browser context."""

    def __init__(
        self, browser: Any, base: str, username: str, password: str, width: int = 1366
    ) -> None:
        self.base = base
        self.context = browser.new_context(
            viewport={"width": width, "height": 900 if width > 600 else 844},
            is_mobile=width <= 600,
            has_touch=width <= 600,
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.goto(f"{base}/accounts/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.page.click("button[type=submit]")
        # Operators and admins land on Tickets, approvers on Approvals.
        self.page.wait_for_url(lambda url: "/accounts/login/" not in url)

    def goto(self, path: str) -> None:
        self.page.goto(self.base + path)

    def shot(self, name: str, full_page: bool = True) -> None:
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def login(browser: Any, web: str, worker: Any, demo: dict[str, Any]) -> Iterator[Any]:
    people: list[Person] = []

    def make(username: str, width: int = 1366) -> Person:
        person = Person(browser, web, username, demo["password"], width=width)
        people.append(person)
        return person

    yield make
    for person in people:
        assert person.errors == [], f"JavaScript errors: {person.errors}"
        person.close()
