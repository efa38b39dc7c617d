"""The ticket pages (issue 24.7, DESIGN §11): /tickets/ lists tickets of every source with
search, filters (status, queue, source) and pages; /tickets/<id>/ shows the thread with
delivery states, the ticket's runs and a start button with every profile the user may
start; customer text is escaped; /ws/tickets/ tells both pages when a ticket changes.
tests/browser/test_tickets.py shows the same in Chromium."""

from __future__ import annotations

import re
from typing import Any

import pytest
from channels.db import database_sync_to_async as sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agentweb.runs import publish
from agentweb.runs.models import AgentProfile, Run
from agentweb.teams.actions import do_save_team
from agentweb.tickets import actions
from agentweb.tickets.models import IntakeRule, Message, Ticket
from tests.tickets.factories import make_ticket
from tests.web import factories as f
from tests.web.test_consumers import communicator

pytestmark = pytest.mark.django_db(transaction=True)

EVIL = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def cards(html: str) -> list[int]:
    """The ticket ids the list shows, in order."""
    return [int(n) for n in re.findall(r'<li class="ticket card" id="ticket-(\d+)"', html)]


def receive(**kw: Any) -> Ticket:
    return actions.do_receive_ticket(actions.Incoming(**kw)).ticket


@pytest.fixture
def mixed() -> dict[str, Ticket]:
    """A ticket of each source: the mailbox, Zendesk, a generic hook, the API, the demo."""
    return {
        "email": receive(
            source="email", subject="Kettle broken", external_id="<k@customer.example>",
            body="My kettle arrived broken.", requester_email="ann@customer.example",
            requester_name="Ann Lee", queue="billing", tags=["refund"],
        ),
        "zendesk": receive(
            source="zendesk", subject="Parcel late", external_id="4711", body="Two weeks now.",
            requester_email="bob@customer.example", queue="shipping", tags=["late"],
        ),
        "helpdesk": receive(
            source="helpdesk", subject="Wrong colour", external_id="H-9", body="It is blue.",
            requester_email="cy@customer.example", queue="shipping",
        ),
        "api": receive(source="api", subject="Invoice copy", body="Send me the invoice."),
        "solved": make_ticket("Thanks!", "All good now.", status="solved", queue="billing"),
    }  # fmt: skip


def test_the_list_shows_every_source_and_filters_by_status_queue_and_source(
    people: dict[str, User], mixed: dict[str, Ticket]
) -> None:
    client = client_for(people["operator"])
    t = {k: v.pk for k, v in mixed.items()}
    html = client.get("/tickets/").content.decode()  # open tickets, newest change first
    assert cards(html) == [t["api"], t["helpdesk"], t["zendesk"], t["email"]]
    for source in ("email", "zendesk", "helpdesk", "api"):
        assert f'<option value="{source}"' in html  # the source filter offers every one
    assert '<option value="billing"' in html and '<option value="shipping"' in html
    assert f'href="/tickets/{t["email"]}/"' in html
    get = lambda **q: cards(client.get("/tickets/", q).content.decode())  # noqa: E731
    assert get(status="all") == [t["solved"], t["api"], t["helpdesk"], t["zendesk"], t["email"]]
    assert get(status="solved") == [t["solved"]]
    assert get(status="all", queue="billing") == [t["solved"], t["email"]]
    assert get(queue="shipping") == [t["helpdesk"], t["zendesk"]]
    assert get(source="zendesk") == [t["zendesk"]]
    assert get(source="zendesk", queue="billing") == []
    assert get(status="nonsense") == get(status="all")  # an odd status is every status


def test_search_finds_words_in_any_message_an_address_and_an_id(
    people: dict[str, User], mixed: dict[str, Ticket]
) -> None:
    client = client_for(people["operator"])
    get = lambda q: cards(client.get("/tickets/", {"q": q, "status": "all"}).content.decode())  # noqa: E731
    actions.do_add_incoming(
        mixed["zendesk"].pk,
        actions.Incoming(source="zendesk", subject="Parcel late", body="Still no tracking."),
    )
    assert get("kettle") == [mixed["email"].pk]  # the subject and the first message
    assert get("tracking") == [mixed["zendesk"].pk]  # a later message
    assert get("bob@customer") == [mixed["zendesk"].pk]
    assert get(f"#{mixed['helpdesk'].pk}") == [mixed["helpdesk"].pk]
    assert get("H-9") == [mixed["helpdesk"].pk]  # the helpdesk's own id
    assert get("²") == [] and get("nothing like it") == []
    html = client.get("/tickets/", {"q": "nothing like it"}).content.decode()
    assert "No open tickets match." in html


def test_the_list_pages_twenty_at_a_time_keeping_the_filters(people: dict[str, User]) -> None:
    now = timezone.now()
    made = [
        make_ticket(f"Question {i}", "?", queue="general", at=now - timezone.timedelta(minutes=i))
        for i in range(45)
    ]
    make_ticket("Elsewhere", "?", queue="other")
    client = client_for(people["operator"])
    first = client.get("/tickets/", {"queue": "general"}).content.decode()
    assert cards(first) == [t.pk for t in made[:20]]
    assert "45 tickets · page 1 of 3" in first
    assert 'href="?queue=general&amp;page=2"' in first
    third = client.get("/tickets/", {"queue": "general", "page": "3"}).content.decode()
    assert cards(third) == [t.pk for t in made[40:]]
    assert 'href="?queue=general&amp;page=2"' in third and "Older" not in third
    assert cards(client.get("/tickets/", {"page": "x"}).content.decode())[:1] != []
    # the search form answers htmx with the list alone
    part = client.get("/tickets/", {"queue": "general"}, HTTP_HX_REQUEST="true",
                      HTTP_HX_TARGET="ticket-list").content.decode()  # fmt: skip
    assert part.startswith('<div id="ticket-list"') and "<html" not in part
    assert cards(part) == cards(first)


def test_customer_text_is_escaped_on_both_pages(people: dict[str, User]) -> None:
    ticket = receive(
        source="email", subject=f"Help {EVIL}", external_id=f"<{EVIL}@x>", body=f"Body {EVIL}",
        requester_email="e@customer.example", requester_name=f"Eve {EVIL}", queue=f"q{EVIL}"[:100],
        tags=[f"t{EVIL}"], fields={"note": EVIL}, quoted=f"> {EVIL}",
        attachments=[{"name": f"{EVIL}.pdf", "size": 10}],
    )  # fmt: skip
    Message.objects.create(ticket=ticket, direction="out", author=EVIL, body=f"Re {EVIL}")
    client = client_for(people["operator"])
    for path in ("/tickets/?status=all", f"/tickets/{ticket.pk}/"):
        html = client.get(path).content.decode()
        assert "<script>alert(2)" not in html and "<img src=x" not in html, path
        assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html, path
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert page.count("&lt;script&gt;alert(2)&lt;/script&gt;") >= 9  # every piece of it


def test_the_ticket_page_shows_the_thread_with_delivery_states_and_its_runs(
    people: dict[str, User], settings: Any
) -> None:
    settings.AGENTWEB_SMTP = None  # mail is off: a reply is stored and says why
    ticket = receive(
        source="email", subject="Kettle broken", external_id="<k@customer.example>",
        body="My kettle arrived broken.", requester_email="ann@customer.example",
        requester_name="Ann Lee", quoted="> earlier text",
        attachments=[{"name": "photo.jpg", "size": 2048}],
    )  # fmt: skip
    with actions.transaction.atomic():
        locked = Ticket.objects.select_for_update().get(pk=ticket.pk)
        actions.do_add_outgoing(locked, "We refund it.", author="ticket-assistant")
    actions.do_add_message(ticket.pk, "Sent by phone", by=people["operator"], direction="out")
    actions.do_add_incoming(
        ticket.pk, actions.Incoming(source="email", subject="x", body="Thank you!")
    )
    run = f.make_run(people["operator"], task="Handle it", status="succeeded")
    run.ticket = ticket
    run.save(update_fields=["ticket"])
    other = f.make_run(people["operator"], task="Something else")
    html = client_for(people["operator"]).get(f"/tickets/{ticket.pk}/").content.decode()
    thread = re.findall(r'<li class="msg card msg-(in|out)" id="message-(\d+)"', html)
    assert [d for d, _ in thread] == ["in", "out", "out", "in"]
    assert html.index("My kettle arrived broken.") < html.index("We refund it.")
    assert html.index("Sent by phone") < html.index("Thank you!")
    assert "photo.jpg" in html and "2.0\xa0KB" in html and "Quoted history" in html
    assert "Not delivered" in html and "AGENTWEB_SMTP_URL is not set" in html
    assert ">Recorded</span>" in html  # a reply sent outside agentweb
    assert f'href="/runs/{run.pk}/"' in html and f'href="/runs/{other.pk}/"' not in html
    assert f'data-live-tickets="{ticket.pk}"' in html


def test_a_queued_retrying_and_sent_reply_each_say_so(people: dict[str, User]) -> None:
    from agentweb.outbox.models import Delivery

    ticket = make_ticket("Parcel", "Where?", source="email", requester_email="a@b.example")
    states = [("queued", 0, ""), ("queued", 2, "451 Mailbox busy"), ("sent", 3, "")]
    for n, (state, attempts, error) in enumerate(states):
        Delivery.objects.create(
            delivery_id=f"d-{n}", channel="email", target="a@b.example", to_label="a@b.example",
            body="x", state=state, attempts=attempts, last_error=error,
            next_attempt_at=timezone.now(), give_up_at=timezone.now(),
        )  # fmt: skip
        Message.objects.create(
            ticket=ticket, direction="out", body=f"reply {n}", delivery_id=f"d-{n}"
        )
    html = client_for(people["operator"]).get(f"/tickets/{ticket.pk}/").content.decode()
    badges = re.findall(
        r'class="badge delivery delivery-(\w+)" data-testid="delivery"[^>]*>([^<]+)<', html
    )
    assert badges == [("queued", "Queued"), ("queued", "Retrying"), ("sent", "Delivered")]
    assert "Attempt 2 failed, retrying to a@b.example: 451 Mailbox busy" in html
    assert "Delivered to a@b.example after 3 attempts." in html


def test_the_start_button_offers_every_profile_and_starts_the_one_picked(
    people: dict[str, User], django_capture_on_commit_callbacks: Any
) -> None:
    AgentProfile.objects.get_or_create(name="triage", defaults={"system_prompt": "x"})
    ticket = make_ticket("Parcel", "Where?", queue="shipping")
    IntakeRule.objects.create(queue="shipping", agent="triage", mode="suggest")
    client = client_for(people["operator"])
    html = client.get(f"/tickets/{ticket.pk}/").content.decode()
    names = sorted(AgentProfile.objects.values_list("name", flat=True))
    assert len(names) >= 2
    select = html.split('id="id_start_agent"', 1)[1].split("</select>", 1)[0]
    assert re.findall(r'<option value="([^"]+)"', select) == names
    assert '<option value="triage" selected>' in select  # the rule's suggestion first
    assert (
        'name="suggested" value="triage" class="primary" data-testid="suggested">'
        "Start triage</button>" in html
    )
    pick = next(n for n in names if n != "triage")
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(f"/tickets/{ticket.pk}/run/", {"agent": pick, "from": "ticket"})
    run = Run.objects.get(ticket=ticket)
    assert response["Location"] == f"/runs/{run.pk}/" and run.agent.name == pick
    # one active run per ticket: the page follows it instead of offering another start
    html = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert f"Follow run #{run.pk}" in html and 'id="id_start_agent"' not in html
    # a suggestion's button starts its profile, whatever the list says
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    with django_capture_on_commit_callbacks(execute=False):
        client.post(
            f"/tickets/{ticket.pk}/run/", {"suggested": "triage", "agent": pick, "from": "ticket"}
        )
    assert Run.objects.filter(ticket=ticket).latest("pk").agent.name == "triage"
    # an unknown profile is refused on the ticket's page
    Run.objects.filter(ticket=ticket).update(status="succeeded")
    response = client.post(f"/tickets/{ticket.pk}/run/", {"agent": "nope", "from": "ticket"})
    assert response["Location"] == f"/tickets/{ticket.pk}/"
    assert Run.objects.filter(ticket=ticket).count() == 2


def test_who_may_not_start_runs_sees_the_ticket_but_no_start_button(
    people: dict[str, User],
) -> None:
    from django.contrib.auth.models import Permission

    viewer = User.objects.create_user("viewer", password="pw-123456789")
    viewer.user_permissions.add(Permission.objects.get(codename="view_run"))
    ticket = make_ticket("Parcel", "Where?")
    html = client_for(viewer).get(f"/tickets/{ticket.pk}/").content.decode()
    assert "Where?" in html and "You may not start runs." in html
    assert 'id="id_start_agent"' not in html


def test_another_teams_ticket_is_no_ticket(people: dict[str, User]) -> None:
    bea = User.objects.create_user("bea", password="pw-123456789")
    bea.groups.add(*people["operator"].groups.all())
    do_save_team(None, actor=None, name="Billing", queues=["billing"], members=[bea])
    do_save_team(None, actor=None, name="Shipping", queues=["shipping"], members=[])
    mine = make_ticket("Charged twice", "?", queue="billing")
    theirs = make_ticket("Parcel lost", "?", queue="shipping")
    client = client_for(bea)
    assert cards(client.get("/tickets/").content.decode()) == [mine.pk]
    assert client.get(f"/tickets/{theirs.pk}/").status_code == 404
    assert client.get(f"/tickets/{mine.pk}/").status_code == 200
    assert ">shipping<" not in client.get("/tickets/").content.decode()  # not even its queue


async def test_the_socket_tells_of_arrivals_changes_and_runs(people: dict[str, User]) -> None:
    cookie = await sync_to_async(_cookie)(people["operator"])
    ticket = await sync_to_async(make_ticket)("Parcel", "Where?")
    everything = communicator("/ws/tickets/", cookie)
    assert (await everything.connect())[0]
    one = communicator(f"/ws/tickets/?ticket={ticket.pk}", cookie)
    assert (await one.connect())[0]
    new = await sync_to_async(receive)(source="api", subject="New one", body="Hello")
    assert await everything.receive_json_from(timeout=5) == {
        "kind": "ticket", "ticket": new.pk, "created": True,
    }  # fmt: skip
    await sync_to_async(actions.do_change_ticket)(ticket.pk, by=people["operator"], status="solved")
    assert await one.receive_json_from(timeout=5) == {
        "kind": "ticket", "ticket": ticket.pk, "created": False,
    }  # fmt: skip
    assert (await everything.receive_json_from(timeout=5))["ticket"] == ticket.pk
    run = await sync_to_async(f.make_run)(people["operator"], task="x")
    run.ticket_id = ticket.pk
    await sync_to_async(run.save)(update_fields=["ticket"])
    await sync_to_async(publish.run_status_now)(run.pk, "running")
    assert await one.receive_json_from(timeout=5) == {
        "kind": "ticket", "ticket": ticket.pk, "run": run.pk,
    }  # fmt: skip
    assert await one.receive_nothing(timeout=0.3)  # the new ticket was not this one's
    await everything.disconnect()
    await one.disconnect()


async def test_the_socket_tells_nobody_of_another_teams_ticket(people: dict[str, User]) -> None:
    def world() -> tuple[User, Ticket]:
        bea = User.objects.create_user("bea", password="pw-123456789")
        bea.groups.add(*people["operator"].groups.all())
        do_save_team(None, actor=None, name="Billing", queues=["billing"], members=[bea])
        do_save_team(None, actor=None, name="Shipping", queues=["shipping"], members=[])
        return bea, make_ticket("Parcel lost", "?", queue="shipping")

    bea, theirs = await sync_to_async(world)()
    cookie = await sync_to_async(_cookie)(bea)
    denied = communicator(f"/ws/tickets/?ticket={theirs.pk}", cookie)
    connected, code = await denied.connect()
    assert not connected and code == 4403
    comm = communicator("/ws/tickets/", cookie)
    assert (await comm.connect())[0]
    await sync_to_async(receive)(source="api", subject="Shipping's", body="?", queue="shipping")
    mine = await sync_to_async(receive)(source="api", subject="Mine", body="?", queue="billing")
    assert (await comm.receive_json_from(timeout=5))["ticket"] == mine.pk
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()
    anonymous = communicator("/ws/tickets/", None)
    assert await anonymous.connect() == (False, 4401)


def _cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def test_a_card_starts_what_the_rules_suggest_for_its_ticket(
    people: dict[str, User], django_capture_on_commit_callbacks: Any
) -> None:
    AgentProfile.objects.get_or_create(name="triage", defaults={"system_prompt": "x"})
    IntakeRule.objects.create(tag="vip", agent="triage", mode="suggest")
    IntakeRule.objects.create(tag="vip", agent="no-such-profile", mode="suggest", position=0)
    vip = make_ticket("Charged twice", "?")
    Ticket.objects.filter(pk=vip.pk).update(tags=["vip"])
    plain = make_ticket("Parcel", "?")
    client = client_for(people["operator"])
    html = client.get("/tickets/").content.decode()
    card = html.split(f'id="ticket-{vip.pk}"', 1)[1].split("</li>", 1)[0]
    assert '<input type="hidden" name="agent" value="triage">' in card
    assert ">Start triage</button>" in card
    other = html.split(f'id="ticket-{plain.pk}"', 1)[1].split("</li>", 1)[0]
    assert ">Run assistant</button>" in other and 'name="agent"' not in other
    with django_capture_on_commit_callbacks(execute=False):
        client.post(f"/tickets/{vip.pk}/run/", {"agent": "triage"})
    assert Run.objects.get(ticket=vip).agent.name == "triage"
