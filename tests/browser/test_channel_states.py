"""Issue 25.7 in Chromium at 1440 and 390 px: each notification's delivery state is on the
approval's card, a channel that is down says why there, the card follows a delivery that
goes through without a reload, and the decision is made while Slack is still down.
Screenshots: /tmp/shots/channels-card-<state>-<width>.png."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agentweb.notify import events
from agentweb.outbox.models import Delivery
from agentweb.runs.models import Approval
from tests.browser.test_pages import WIDTHS, no_sideways_scroll
from tests.conftest import wait_for
from tests.web.test_approval_cards import refund_waiting

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


def told(approval: Approval, channel: str, to: str, state: str, error: str = "") -> Delivery:
    """A notification about ``approval`` as the outbox keeps it (due tomorrow: no worker
    attempts it during the test)."""
    later = timezone.now() + timedelta(days=1)
    return Delivery.objects.create(
        delivery_id=f"note-{approval.pk}-{channel}-{to}",
        channel=channel,
        target=to,
        to_label=to,
        body="x",
        topic="approval.requested",
        about_type=events.ABOUT,
        about_id=approval.pk,
        state=state,
        attempts=1 if error else 0,
        last_error=error,
        next_attempt_at=later,
        give_up_at=later,
        sent_at=timezone.now() if state == "sent" else None,
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_the_card_shows_each_channel_and_follows_it_live(
    login: Any, demo: dict[str, Any], width: int
) -> None:
    approval = refund_waiting(demo)
    told(approval, "email", "approver <approver@example.com>", "sent")
    slack = told(approval, "slack", "Slack", "queued", "Slack (hooks.slack.com): HTTP 500")
    approver = login("approver", width=width)
    page = approver.page
    approver.goto("/approvals/")
    page.evaluate("window.__sameDocument = true")
    line = page.locator(f'[data-told="{approval.pk}"]')
    line.wait_for()
    text = line.inner_text()
    assert "email approver <approver@example.com> · sent" in text
    assert "slack Slack · queued (Slack (hooks.slack.com): HTTP 500)" in text
    no_sideways_scroll(approver)
    approver.shot(f"channels-card-slack-down-{width}")
    # Slack takes it at last: the card says so without a reload
    Delivery.objects.filter(pk=slack.pk).update(state="sent", last_error="", attempts=2)
    events.deliveries_changed(slack)  # the outbox's hook, after its commit
    page.locator(f'[data-told="{approval.pk}"] [data-channel="slack"]', has_text="sent").wait_for(
        timeout=15_000
    )
    assert page.evaluate("window.__sameDocument === true")
    approver.shot(f"channels-card-slack-sent-{width}")
    # the details page lists each delivery with its state
    page.locator(f'[data-told="{approval.pk}"] a', has_text="details").click()
    page.wait_for_url(f"**/approvals/{approval.pk}/**")
    rows = page.locator("#notifications tbody tr").all_inner_texts()
    assert len(rows) == 2 and all("sent" in r for r in rows)
    no_sideways_scroll(approver)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_decision_is_made_while_slack_is_down(
    login: Any, demo: dict[str, Any], width: int
) -> None:
    approval = refund_waiting(demo)
    told(approval, "slack", "Slack", "failed", "Slack (hooks.slack.com): HTTP 404 no_service")
    approver = login("approver", width=width)
    page = approver.page
    approver.goto("/approvals/")
    card = page.locator(".inbox-item", has=page.locator(f'[data-told="{approval.pk}"]'))
    assert (
        "slack Slack · failed (Slack (hooks.slack.com): HTTP 404 no_service)" in card.inner_text()
    )
    card.get_by_role("button", name="Approve", exact=True).click()
    # (a click on the button decides; only the "a" key asks first on a high-risk card)
    wait_for(lambda: Approval.objects.get(pk=approval.pk).status == "approved", timeout=30)
    approver.shot(f"channels-card-decided-{width}")
