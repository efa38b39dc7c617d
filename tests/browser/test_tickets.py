"""The ticket pages in Chromium at 1440 and 390 px (issue 24.7), against the live stack:
a ticket a helpdesk posts through the signed webhook appears on an open /tickets/ without a
reload; search, the queue and source filters and the pages; the ticket's page shows the
thread, a reply's delivery state changing live and a customer writing again, and starts a
run of the profile picked. Screenshots: /tmp/shots/tickets-*-<width>.png."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from agentweb import signing
from agentweb.outbox.models import Delivery
from agentweb.runs.models import AgentProfile, Run
from agentweb.tickets import actions
from agentweb.tickets.models import Message
from tests.browser.test_pages import WIDTHS, no_sideways_scroll

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

SECRET = "browser-test-helpdesk-secret-0123456789"
EVIL = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def hook(web: str, delivery: str, external_id: str, subject: str, body: str) -> int:
    raw = json.dumps(
        {
            "event": "ticket.created",
            "delivery_id": delivery,
            "ticket": {
                "external_id": external_id,
                "subject": subject,
                "requester": {"email": "dana@customer.example", "name": f"Dana {EVIL}"},
                "queue": "returns",
                "tags": ["web"],
            },
            "message": {"external_id": f"m-{delivery}", "body": body},
        }
    ).encode()
    response = httpx.post(
        f"{web}/hooks/tickets/desk",
        content=raw,
        headers={"Content-Type": "application/json", **signing.agentweb_headers(SECRET, raw)},
    )
    assert response.status_code == 202, response.text
    return int(response.json()["ticket"])


def same_document(person: Any) -> bool:
    return bool(person.page.evaluate("window.__sameDocument === true"))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_list_is_live_searchable_filtered_and_paged(
    login: Any, web: str, demo: dict[str, Any], width: int
) -> None:
    actions.do_add_source("desk", kind="generic", secret=SECRET)
    for i in range(21):
        actions.do_receive_ticket(
            actions.Incoming(source="api", subject=f"Bulk question {i}", body="?", queue="bulk")
        )
    operator = login("operator", width=width)
    page = operator.page
    operator.goto("/tickets/")
    page.wait_for_selector("li.ticket")
    page.evaluate("window.__sameDocument = true")
    page.wait_for_function("() => document.getElementById('conn').dataset.state === 'open'")
    # A helpdesk posts a ticket: it appears at the top, no reload.
    ticket_id = hook(web, f"d-{width}", f"HD-{width}", f"Return label {EVIL}", f"Body {EVIL}")
    card = page.locator(f"#ticket-{ticket_id}")
    card.wait_for(timeout=15_000)
    assert same_document(operator)
    assert page.locator("li.ticket").first.get_attribute("id") == f"ticket-{ticket_id}"
    assert "<script>" in card.inner_text() and page.evaluate("window.__xss") is None
    assert "desk" in card.locator(".ticket-meta").inner_text()
    no_sideways_scroll(operator)
    operator.shot(f"tickets-live-{width}")
    # The source filter: only the helpdesk's.
    page.select_option("#id_ticket_source", "desk")
    page.wait_for_url(re.compile(r"source=desk"))
    assert page.locator("li.ticket").count() == 1
    assert page.locator("li.ticket").first.get_attribute("id") == f"ticket-{ticket_id}"
    # The queue filter and pages: 21 bulk questions, 20 a page.
    page.select_option("#id_ticket_source", "")
    page.wait_for_url(re.compile(r"source=(&|$)"))
    page.select_option("#id_ticket_queue", "bulk")
    page.wait_for_url(re.compile(r"queue=bulk"))
    assert page.locator("li.ticket").count() == 20
    assert "21 tickets · page 1 of 2" in page.locator(".pager").inner_text()
    page.get_by_role("link", name="Older →").click()
    page.wait_for_url(re.compile(r"page=2"))
    assert page.locator("li.ticket").count() == 1
    assert "Bulk question 0" in page.locator("li.ticket").first.inner_text()
    # Search: words of the message, on every status.
    page.select_option("#id_ticket_queue", "")
    page.wait_for_url(re.compile(r"queue=&"))
    page.fill("#id_ticket_q", "Return label")
    page.wait_for_url(re.compile(r"q=Return(\+|%20)label"))
    assert page.locator("li.ticket").count() == 1
    page.get_by_role("link", name=re.compile(r"^All")).click()
    page.wait_for_url(re.compile(r"status=all"))
    assert page.input_value("#id_ticket_q") == "Return label"
    assert page.locator("li.ticket").count() == 1
    no_sideways_scroll(operator)
    operator.shot(f"tickets-search-{width}")
    # The card opens the ticket's page.
    page.locator(f"#ticket-{ticket_id} a.ticket-link").click()
    page.wait_for_url(re.compile(rf"/tickets/{ticket_id}/$"))
    assert page.locator("h1").inner_text().startswith("Return label <img")
    assert page.evaluate("window.__xss") is None


@pytest.mark.parametrize("width", WIDTHS)
def test_the_ticket_page_shows_deliveries_live_and_starts_the_profile_picked(
    login: Any, demo: dict[str, Any], width: int
) -> None:
    ticket = actions.do_receive_ticket(
        actions.Incoming(
            source="email", subject="Kettle arrived broken", external_id=f"<k{width}@c.example>",
            body="The lid is cracked.\nA refund, please.", requester_email="ann@c.example",
            requester_name="Ann Lee", quoted="> On Monday you wrote:\n> It ships today",
            attachments=[{"name": "lid.jpg", "size": 48213}], queue="billing",
        )
    ).ticket  # fmt: skip
    # A reply whose delivery the outbox keeps retrying (due tomorrow: nobody attempts it).
    later = timezone.now() + timedelta(days=1)
    delivery = Delivery.objects.create(
        delivery_id=f"reply-test-{width}", channel="email", target="ann@c.example",
        to_label="ann@c.example", body="x", attempts=1, last_error="451 4.3.0 Mailbox busy",
        next_attempt_at=later, give_up_at=later,
    )  # fmt: skip
    reply = Message.objects.create(
        ticket=ticket, direction="out", author="bot", body="Sorry! A refund is on its way.",
        delivery_id=delivery.delivery_id,
    )  # fmt: skip
    operator = login("operator", width=width)
    page = operator.page
    operator.goto(f"/tickets/{ticket.pk}/")
    page.evaluate("window.__sameDocument = true")
    page.wait_for_function("() => document.getElementById('conn').dataset.state === 'open'")
    badge = page.locator(f"#message-{reply.pk} [data-testid=delivery]")
    assert badge.inner_text() == "Retrying"
    assert "451 4.3.0 Mailbox busy" in page.locator(f"#message-{reply.pk}").inner_text()
    page.locator("details.quoted summary").click()
    assert "It ships today" in page.locator("details.quoted").inner_text()
    operator.shot(f"tickets-thread-retrying-{width}")
    # The delivery goes through: the badge changes without a reload; the quote stays open.
    Delivery.objects.filter(pk=delivery.pk).update(
        state="sent", attempts=2, last_error="", sent_at=timezone.now()
    )
    delivery.about_type, delivery.about_id = "ticketmessage", reply.pk
    actions.delivery_changed(delivery)
    page.wait_for_function(
        f"() => document.querySelector('#message-{reply.pk} [data-testid=delivery]')"
        ".textContent.trim() === 'Delivered'"
    )
    assert page.locator("details.quoted").get_attribute("open") is not None
    # The customer writes again: the message appears at the end of the thread.
    actions.do_add_incoming(
        ticket.pk, actions.Incoming(source="email", subject="x", body="Thanks, got it!")
    )
    page.locator(".msg", has_text="Thanks, got it!").wait_for(timeout=15_000)
    assert page.locator(".thread > li").last.inner_text().count("Thanks, got it!") == 1
    assert same_document(operator)
    no_sideways_scroll(operator)
    operator.shot(f"tickets-thread-{width}")
    # Start a run of a profile picked from every profile there is.
    names = sorted(AgentProfile.objects.values_list("name", flat=True))
    options = page.locator("#id_start_agent option").all_inner_texts()
    assert options == names
    pick = next(n for n in names if n != "ticket-assistant")
    page.select_option("#id_start_agent", pick)
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get(ticket=ticket)
    assert run.agent.name == pick
    # Back on the ticket: the run is listed and followed instead of another start.
    operator.goto(f"/tickets/{ticket.pk}/")
    assert page.locator(f'.ticket-runs a[href="/runs/{run.pk}/"]').count() == 1
    if Run.objects.get(pk=run.pk).is_active:
        assert page.get_by_role("link", name=f"Follow run #{run.pk}").is_visible()
    operator.shot(f"tickets-runs-{width}")
