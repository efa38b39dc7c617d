"""The Content-Security-Policy in a real browser: every page, a live run and htmx work
under it, with no violation reported (DESIGN §5, issue 12)."""

from __future__ import annotations

from typing import Any

import pytest

from agentweb.runs.models import Run
from tests.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
"""


def test_pages_work_under_the_policy_without_violations(login: Any) -> None:
    admin = login("admin")
    console: list[str] = []
    admin.page.on(
        "console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None
    )
    admin.context.add_init_script(WATCH)
    violations: list[str] = []

    def visit(path: str) -> None:
        admin.goto(path)
        admin.page.wait_for_load_state("networkidle")
        violations.extend(f"{path}: {v}" for v in admin.page.evaluate("window.__csp || []"))

    visit("/tickets/")
    # Start a run from the ticket list (a form post), then watch it live over the socket.
    card = admin.page.locator("li.ticket").first
    card.get_by_role("button", name="Run assistant").click()
    admin.page.wait_for_url("**/runs/*/")
    run_id = int(admin.page.url.rstrip("/").split("/")[-1])
    wait_for(lambda: Run.objects.get(pk=run_id).status != "queued", 30)
    admin.page.wait_for_selector("#event-2", timeout=30_000)  # arrived over the WebSocket
    assert admin.page.evaluate("typeof window.htmx") == "object"
    violations.extend(f"run page: {v}" for v in admin.page.evaluate("window.__csp || []"))
    for path in [
        "/runs/",
        "/approvals/",
        f"/runs/compare/?a={run_id}&b={run_id}",
        "/runs/import/",
        f"/runs/{run_id}/replay/",
        "/agents/",
        "/account/tokens/",
    ]:
        visit(path)
    # htmx under the policy: the runs search swaps its table without a page load.
    visit("/runs/")
    admin.page.evaluate("window.__samePage = true")
    assert admin.page.locator("#runs-table tbody tr").count() >= 1
    admin.page.locator("input[name=q]").fill("no such task text")
    admin.page.get_by_role("button", name="Search").click()
    admin.page.wait_for_function(
        "() => !document.querySelector('#runs-table').innerText.includes('Handle ticket')",
        timeout=10_000,
    )
    assert admin.page.evaluate("window.__samePage") is True  # swapped by htmx, not reloaded
    assert violations == [], violations
    assert not [c for c in console if "Content Security Policy" in c], console
    admin.shot("csp-runs")
