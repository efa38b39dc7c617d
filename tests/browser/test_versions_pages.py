"""Versions, dry runs, forks and suites in Chromium at 1440 and 390 px (DESIGN §14): the
profile page's history and diff, a dry run's labels and would-calls, a fork beside its
source, and two experiments side by side. Screenshots go to /tmp/shots (versions-*)."""

from __future__ import annotations

from typing import Any

import pytest

from agentweb.runs import actions, forks, profiles, suites
from agentweb.runs.models import AgentProfile, Run, RunEvent
from tests.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

WIDTHS = [1440, 390]
REFUND = "Refund the cracked teapot on A1001"


def no_sideways_scroll(person: Any) -> None:
    scroll, inner = person.page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert scroll <= inner, f"{person.page.url}: page is {scroll} px wide in {inner} px"


def finished(run: Run) -> Run:
    try:
        wait_for(lambda: Run.objects.get(pk=run.pk).status in Run.FINAL, 60)
    except AssertionError:
        now = Run.objects.get(pk=run.pk)
        kinds = list(RunEvent.objects.filter(run=run).values_list("type", flat=True))
        raise AssertionError(f"run {run.pk} is {now.status}: {kinds}") from None
    return Run.objects.get(pk=run.pk)


@pytest.mark.parametrize("width", WIDTHS)
def test_history_diff_dry_run_and_fork(login: Any, demo: dict[str, Any], width: int) -> None:
    name = f"versioned-{width}"
    base = AgentProfile.objects.get(name="ticket-assistant")
    data = profiles.profile_json(base)
    data.pop("updated_at")
    profile = profiles.save_profile({**data, "name": name})
    profiles.save_profile(
        {"system_prompt": base.system_prompt.replace("Find the facts", "Check every fact")},
        profile,
        partial=True,
    )
    admin = login("admin", width=width)
    admin.goto(f"/agents/{profile.pk}/#versions")
    admin.page.wait_for_selector("#version-diff .dl-add")
    diff = admin.page.locator("#version-diff").inner_text()
    assert "Check every fact" in diff and "Find the facts" in diff
    no_sideways_scroll(admin)
    admin.page.locator("#versions").scroll_into_view_if_needed()
    admin.shot(f"versions-history-{width}", full_page=False)

    run = actions.do_create_run(user=demo["operator"], task=REFUND, agent_name=name, mode="dry")
    run = finished(run)
    assert run.status == "succeeded", run.failure_reason
    would = RunEvent.objects.filter(run=run, type="tool_call_finished", data__dry=True)
    assert would.exists()  # the refund was not executed
    operator = login("operator", width=width)
    operator.goto(f"/runs/{run.pk}/")
    operator.page.wait_for_selector(".badge.dry")
    assert "would call: not executed" in operator.page.content()
    no_sideways_scroll(operator)
    operator.shot(f"versions-dry-run-{width}")

    first_result = RunEvent.objects.filter(run=run, type="tool_call_finished").order_by("seq")[0]
    fork = forks.do_fork(run, user=demo["operator"], at_seq=first_result.seq)
    fork = finished(fork)
    operator.goto(f"/runs/compare/?a={run.pk}&b={fork.pk}")
    operator.page.wait_for_selector("#fork-note")
    assert f"is a fork of #{run.pk}" in operator.page.locator("#fork-note").inner_text()
    no_sideways_scroll(operator)
    operator.shot(f"versions-fork-compare-{width}")


def test_suites_and_experiments_side_by_side(login: Any, demo: dict[str, Any]) -> None:
    body = suites.CreateSuite.parse(
        {
            "name": "teapot <refunds>",
            "cases": [
                {"name": "refund", "task": REFUND, "expect": {"calls": [{"tool": "issue_refund"}]}},
                {"name": "where", "task": "Where is order A1001?",
                 "expect": {"no_calls": ["issue_refund"], "answer_contains": ["A1001"]}},
            ],
        }
    )  # fmt: skip
    suite = suites.do_create_suite(demo["operator"], body)
    ids = []
    for _ in range(2):
        exp = suites.do_start_experiment(
            demo["operator"], suite, suites.StartExperiment.parse({"agent": "ticket-assistant"})
        )
        wait_for(lambda e=exp: suites.experiment_json(e)["status"] == "done", 120)
        ids.append(exp.pk)
    operator = login("operator", width=1440)
    operator.goto("/suites/")
    operator.page.wait_for_selector(f"#experiment-{ids[1]}")
    assert "teapot <refunds>" in operator.page.inner_text("body")  # escaped, shown as text
    operator.shot("versions-suites-1440")
    operator.goto(f"/experiments/compare/?a={ids[0]}&b={ids[1]}")
    operator.page.wait_for_selector(".experiment-compare")
    operator.shot("versions-experiments-compare-1440")
    phone = login("operator", width=390)
    phone.goto(f"/experiments/compare/?a={ids[0]}&b={ids[1]}")
    no_sideways_scroll(phone)
    phone.shot("versions-experiments-compare-390")
