"""Small, visible things in Chromium at 1440 and 390 px (DESIGN §16, issue 26.9): no table
is clipped (at 1440 it fits its box, at 390 it may scroll inside its own box); a signed-in
user without a role sees one page that says to ask an admin, a menu without sections they
cannot open, and no API tokens; the lockout page says its time in words."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User

from agentweb.runs import actions
from agentweb.runs.models import ToolExecution
from tests.web import factories as f

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

WIDTHS = [1440, 390]

#: Per table: how wide it is, how wide the box it sits in, and whether that box (or one
#: around it, inside the page) scrolls sideways.
TABLES = """() => Array.from(document.querySelectorAll("main table")).map(t => {
  let box = t.parentElement, scrolls = false;
  for (let el = box; el && el !== document.body; el = el.parentElement) {
    const x = getComputedStyle(el).overflowX;
    if (x === "auto" || x === "scroll") { scrolls = true; box = el; break; }
  }
  const cells = Array.from(t.querySelectorAll("th, td"));
  const cut = cells.filter(c => c.scrollWidth > c.clientWidth + 1 &&
                                getComputedStyle(c).overflowX === "hidden").length;
  return {cls: t.className, width: t.scrollWidth, box: box.clientWidth, scrolls, cut,
          right: t.getBoundingClientRect().right, inner: window.innerWidth};
})"""


def settled_runs(demo: dict[str, Any]) -> list[int]:
    """Runs that fill the tables: a decided refund, an edit, tools and a long task."""
    ids = []
    for n in range(2):
        run = f.make_run(demo["operator"], task="Refund the cracked teapot on A1001 " * 6)
        f.emit(
            run,
            {"type": "run_started", "data": {}},
            f.model_called(),
            f.tool_started(),
            f.tool_finished(),
        )
        approval = f.request_approval(run, call_id=f"c{n}")
        actions.do_decide_approval(
            approval_id=approval.pk,
            user=demo["approver"],
            decision="approve",
            arguments={"order_id": "A1001", "amount": 12.5, "reason": "partial " * 20},
        )
        ToolExecution.objects.create(
            run=run, call_id=f"c{n}", tool="issue_refund", arguments={}, status="succeeded"
        )
        f.emit(run, {"type": "run_finished", "data": {"final_answer": "Done."}}, status="succeeded")
        ids.append(run.pk)
    return ids


@pytest.mark.parametrize("width", WIDTHS)
def test_no_table_is_clipped(login: Any, demo: dict[str, Any], width: int) -> None:
    a, b = settled_runs(demo)
    admin = login("admin", width=width)
    admin.goto("/account/tokens/")
    admin.page.fill("input[name=name]", "a token with a rather long name for its column " * 2)
    admin.page.get_by_role("button", name="Create token").click()
    admin.page.wait_for_selector("#new-token")
    for path in [
        "/agents/",
        "/agents/new/",  # the tool rows
        "/runs/",
        "/approvals/",
        "/account/tokens/",
        f"/runs/compare/?a={a}&b={b}",
        "/runs/compare/",
        f"/runs/{a}/",
    ]:
        admin.goto(path)
        tables = admin.page.evaluate(TABLES)
        assert tables or path in (f"/runs/{a}/",), path
        for t in tables:
            assert t["cut"] == 0, (path, t)
            if width >= 1000:  # fits its box: nothing to scroll to
                assert t["width"] <= t["box"] + 1, (path, t)
            else:  # wider than the phone: it scrolls in its own box, not the page
                assert t["width"] <= t["box"] + 1 or t["scrolls"], (path, t)
        scroll, inner = admin.page.evaluate(
            "[document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert scroll <= inner, (path, scroll, inner)
        name = path.strip("/").split("?")[0].replace("/", "-") or "home"
        admin.shot(f"tables-{name}-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_user_without_a_role_is_told_to_ask_for_one(
    login: Any, demo: dict[str, Any], width: int
) -> None:
    User.objects.create_user("newcomer", password=demo["password"])
    newcomer = login("newcomer", width=width)
    page = newcomer.page
    message = page.locator(".no-role")
    assert message.is_visible()
    text = message.inner_text()
    assert "no role yet" in text and "ask an administrator" in text
    assert "fix the input" not in page.content()
    assert page.locator(".no-role a[href='/']").count() == 0  # no link to itself
    for section in ("Tickets", "Runs", "Approvals", "Agents", "API tokens"):
        assert page.get_by_role("link", name=re.compile(f"^{section}")).count() == 0, section
    if width < 700:
        page.get_by_role("button", name=re.compile("Menu")).click()
    else:
        page.locator(".usermenu-toggle").click()
    assert page.locator(".usermenu-items").get_by_role("button", name="Log out").is_visible()
    assert page.locator(".no-role").get_by_role("button", name="Log out").is_visible()
    newcomer.shot(f"no-role-{width}")
    for path in ("/runs/", "/approvals/", "/account/tokens/"):
        response = page.goto(newcomer.base + path)
        assert response is not None and response.status == 403, path
        assert page.locator(".no-role").is_visible(), path
    # No token either through the form's POST.
    token = page.evaluate(
        """async () => {
      const csrf = document.cookie.match(/csrftoken=([^;]+)/)[1];
      const r = await fetch("/account/tokens/", {method: "POST", headers:
        {"Content-Type": "application/x-www-form-urlencoded", "X-CSRFToken": csrf},
        body: "name=sneaky"});
      return r.status;
    }"""
    )
    assert token == 403
    from agentweb.accounts.models import ApiToken

    assert not ApiToken.objects.filter(user__username="newcomer").exists()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_lockout_page_says_its_time_in_words(
    browser: Any, web: str, demo: dict[str, Any], width: int
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        for _ in range(6):
            page.goto(f"{web}/accounts/login/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "wrong password")
            page.click("button[type=submit]")
        text = page.locator("main").inner_text()
        assert "Try again in 15 minutes" in text, text
        assert "PT15M" not in page.content()
        page.screenshot(path=f"/tmp/shots/lockout-{width}.png", full_page=True)
    finally:
        context.close()  # the lockout's rows go with the test database's flush


@pytest.mark.parametrize("width", WIDTHS)
def test_the_readme_example_gets_a_right_answer(
    login: Any, demo: dict[str, Any], width: int
) -> None:
    """ "Where is order A1001?" typed into the task form, as the README suggests."""
    operator = login("operator", width=width)
    page = operator.page
    operator.goto("/tickets/")
    page.locator("details.task-form > summary").click()
    page.fill("#id_task", "Where is order A1001?")
    page.locator("details.task-form").get_by_role("button").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    page.wait_for_selector(".ev-approval_requested", timeout=60_000)
    timeline = page.locator("#timeline").inner_text()
    assert "Your order A1001 was delivered on 2026-11-20 by UPS" in timeline
    assert "Adding or removing items" not in timeline
    assert "search_kb" not in timeline and "escalate_to_carrier" not in timeline
    operator.shot(f"readme-where-is-a1001-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_profile_whose_tools_are_not_loaded_says_so(
    login: Any, demo: dict[str, Any], width: int
) -> None:
    from agentweb.runs.models import AgentProfile, Run

    profile = AgentProfile.objects.create(
        name=f"ops-{width}",
        system_prompt="You compute for {{user}}.",
        allowed_tools=["get_order", "run_python", "browse"],
    )
    admin = login("admin", width=width)
    page = admin.page
    admin.goto(f"/agents/{profile.pk}/")
    notice = page.locator(".missing-tools").inner_text()
    assert "Tools not loaded:" in notice and "run_python" in notice and "browse" in notice
    admin.shot(f"missing-tools-profile-{width}")
    run = actions.do_create_run(
        user=demo["operator"], task="Where is order A1001?", agent_name=profile.name
    )
    admin.goto(f"/runs/{run.pk}/")
    page.wait_for_selector(".ev-run_started .missing-tools", timeout=30_000)
    text = page.locator(".ev-run_started").inner_text()
    assert "does not load: run_python, browse" in text
    page.locator(".ev-run_started details.system-prompt > summary").click()
    assert "You compute for operator." in page.locator(".ev-run_started").inner_text()
    from tests.conftest import wait_for

    wait_for(lambda: Run.objects.get(pk=run.pk).status != "running", 60)
    admin.shot(f"missing-tools-run-{width}")
