"""Teams own queues (DESIGN §15): every page, API call and socket, for every person of two
teams, an admin and an operator in no team, on every run of the other team and their own.

Billing (queue "billing"): bea (operator), bill (approver). Shipping (queue "shipping"):
sam (operator), sue (approver). ada is an admin, nia an operator in no team.
"""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async as sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils.html import escape

from agentweb.accounts.models import ApiToken
from agentweb.accounts.roles import ensure_roles
from agentweb.runs import actions, publish
from agentweb.runs.models import Approval, Run
from agentweb.teams.actions import do_save_team
from agentweb.tickets import actions as tickets
from agentweb.web.context import pending_count
from tests.tickets.factories import make_ticket
from tests.web import factories as f
from tests.web.test_consumers import communicator

pytestmark = pytest.mark.django_db(transaction=True)

PEOPLE = {
    "bea": "operator",
    "bill": "approver",
    "sam": "operator",
    "sue": "approver",
    "ada": "admin",
    "nia": "operator",
}


class World:
    def __init__(self) -> None:
        groups = ensure_roles()
        self.users: dict[str, User] = {}
        for name, role in PEOPLE.items():
            user = User.objects.create_user(name, f"{name}@example.com", "pw-123456789")
            user.groups.add(groups[role])
            self.users[name] = user
        u = self.users
        do_save_team(
            None, actor=None, name="Billing", queues=["billing"], members=[u["bea"], u["bill"]]
        )
        do_save_team(
            None, actor=None, name="Shipping", queues=["shipping"], members=[u["sam"], u["sue"]]
        )
        self.tickets = {
            "billing": make_ticket("Billing: charged twice", queue="billing"),
            "shipping": make_ticket("Shipping: parcel lost", queue="shipping"),
            "moved": make_ticket("Moved: now with shipping", queue="shipping"),
            "nobody": make_ticket("Nobody's: no queue", queue=""),
        }
        self.runs: dict[str, Run] = {}
        self.approvals: dict[str, Approval] = {}
        self._run("billing", "bea", "billing")
        self._run("shipping", "sam", "shipping")
        self._run("free_billing", "bea", None)  # no ticket: belongs to bea's team
        self._run("free_shipping", "sam", None)
        self._run("moved", "bea", "moved")  # bea started it; its ticket is shipping's now
        self._run("nobody", "ada", "nobody")
        # A sub-run of shipping's run: its top run's ticket and starter.
        child = f.make_run(u["sam"], task="task of child")
        child.parent, child.root, child.depth = self.runs["shipping"], self.runs["shipping"], 2
        child.ticket = self.tickets["shipping"]
        child.save()
        self.runs["child_shipping"] = child
        f.emit(child, {"type": "run_started", "data": {}})
        self.approvals["child_shipping"] = f.request_approval(child, call_id="c-child")

    def _run(self, key: str, starter: str, ticket: str | None) -> None:
        run = f.make_run(self.users[starter], task=f"task of {key}")
        if ticket is not None:
            run.ticket = self.tickets[ticket]
            run.save(update_fields=["ticket"])
        f.emit(run, {"type": "run_started", "data": {}}, f.model_called())
        self.approvals[key] = f.request_approval(run, call_id=f"c-{key}")
        self.runs[key] = run


ALL_RUNS = {
    "billing",
    "shipping",
    "free_billing",
    "free_shipping",
    "moved",
    "nobody",
    "child_shipping",
}
SEES_RUNS = {
    "bea": {"billing", "free_billing", "moved"},
    "bill": {"billing", "free_billing"},
    "sam": {"shipping", "free_shipping", "moved", "child_shipping"},
    "sue": {"shipping", "free_shipping", "moved", "child_shipping"},
    "ada": ALL_RUNS,
    "nia": set(),
}
SEES_TICKETS = {
    "bea": {"billing"},
    "bill": {"billing"},
    "sam": {"shipping", "moved"},
    "sue": {"shipping", "moved"},
    "ada": {"billing", "shipping", "moved", "nobody"},
    "nia": set(),
}


@pytest.fixture
def world() -> World:
    return World()


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api(user: User) -> Client:
    return Client(headers={"authorization": f"Bearer {ApiToken.issue(user, name='t')}"})


def names(world: World, kind: str, ids: set[int]) -> set[str]:
    table: dict[str, Any] = world.runs if kind == "runs" else world.tickets
    return {k for k, v in table.items() if v.pk in ids}


@pytest.mark.parametrize("who", sorted(PEOPLE))
def test_run_pages_answer_only_for_ones_teams_runs(world: World, who: str) -> None:
    client = browser(world.users[who])
    for key, run in world.runs.items():
        want = 200 if key in SEES_RUNS[who] else 404
        for path in (f"/runs/{run.pk}/", f"/runs/{run.pk}/replay/", f"/runs/{run.pk}/export.json"):
            got = client.get(path).status_code
            assert got == want, f"{who} {path} ({key}): {got}, expected {want}"
        other = world.runs["billing" if key != "billing" else "shipping"]
        compare = client.get(f"/runs/compare/?a={run.pk}&b={other.pk}").status_code
        if key not in SEES_RUNS[who]:
            assert compare == 404, f"{who} compare {key}: {compare}"
            # The page's own cancel button, on another team's run.
            cancel = client.post(f"/runs/{run.pk}/cancel/").status_code
            assert cancel == 404, f"{who} cancels {key} from its page: {cancel}"
            assert not Run.objects.get(pk=run.pk).cancel_requested
    listing = client.get("/runs/").content.decode()
    for key, run in world.runs.items():
        if key not in SEES_RUNS[who]:
            assert f'href="/runs/{run.pk}/"' not in listing, f"{who} sees {key} in /runs/"
        elif run.parent_id is None:
            assert f'href="/runs/{run.pk}/"' in listing, f"{who} misses {key} in /runs/"
    searched = client.get("/runs/", {"q": "task of"}).content.decode()
    for key, run in world.runs.items():
        if key not in SEES_RUNS[who]:
            assert f'href="/runs/{run.pk}/"' not in searched


@pytest.mark.parametrize("who", sorted(PEOPLE))
def test_the_api_lists_and_answers_only_ones_teams_runs(world: World, who: str) -> None:
    client = api(world.users[who])
    listed = {r["id"] for r in client.get("/api/runs").json()["runs"]}
    assert names(world, "runs", listed) == SEES_RUNS[who]
    searched = client.get("/api/runs", {"q": "task of shipping"}).json()["runs"]
    assert names(world, "runs", {r["id"] for r in searched}) <= SEES_RUNS[who]
    for key, run in world.runs.items():
        want = 200 if key in SEES_RUNS[who] else 404
        for path in (f"/api/runs/{run.pk}", f"/api/runs/{run.pk}/events"):
            answer = client.get(path)
            assert answer.status_code == want, f"{who} {path} ({key}): {answer.status_code}"
            if want == 404:
                assert answer.json()["error"]["code"] == "not_found"
        if key not in SEES_RUNS[who]:
            cancel = client.post(f"/api/runs/{run.pk}/cancel")
            assert cancel.status_code == 404, f"{who} cancels {key}: {cancel.status_code}"
            assert not Run.objects.get(pk=run.pk).cancel_requested


@pytest.mark.parametrize("who", sorted(PEOPLE))
def test_tickets_pages_api_and_counts_show_ones_queues_only(world: World, who: str) -> None:
    listed = {t["id"] for t in api(world.users[who]).get("/api/tickets").json()["tickets"]}
    assert names(world, "tickets", listed) == SEES_TICKETS[who]
    page = browser(world.users[who]).get("/tickets/")
    assert page.status_code == 200
    html = page.content.decode()
    for key, ticket in world.tickets.items():
        assert (escape(ticket.subject) in html) == (key in SEES_TICKETS[who]), f"{who}: {key}"
    open_count = page.context["counts"].get("open", 0)
    assert open_count == len(SEES_TICKETS[who])
    for key, ticket in world.tickets.items():  # each ticket's own page
        status = browser(world.users[who]).get(f"/tickets/{ticket.pk}/").status_code
        assert status == (200 if key in SEES_TICKETS[who] else 404), f"{who}: {key}"


@pytest.mark.parametrize("who", ["bea", "sam", "nia"])
def test_another_teams_ticket_is_not_found_nor_changed(world: World, who: str) -> None:
    client = api(world.users[who])
    for key, ticket in world.tickets.items():
        visible = key in SEES_TICKETS[who]
        got = client.get(f"/api/tickets/{ticket.pk}")
        assert got.status_code == (200 if visible else 404), f"{who} {key}"
        if visible:
            continue
        patched = client.patch(
            f"/api/tickets/{ticket.pk}", {"status": "solved"}, content_type="application/json"
        )
        added = client.post(
            f"/api/tickets/{ticket.pk}/messages", {"body": "hi"}, content_type="application/json"
        )
        assert (patched.status_code, added.status_code) == (404, 404), f"{who} {key}"
        ticket.refresh_from_db()
        assert ticket.status == "open" and ticket.messages.count() == 1
    searched = client.get("/api/tickets", {"q": "parcel"}).json()["tickets"]
    assert names(world, "tickets", {t["id"] for t in searched}) <= SEES_TICKETS[who]


def test_a_ticket_handed_to_another_team_leaves_the_first(world: World) -> None:
    bea = api(world.users["bea"])
    ticket = world.tickets["billing"]
    moved = bea.patch(
        f"/api/tickets/{ticket.pk}", {"queue": "shipping"}, content_type="application/json"
    )
    assert moved.status_code == 200 and moved.json()["queue"] == "shipping"
    assert bea.get(f"/api/tickets/{ticket.pk}").status_code == 404
    assert api(world.users["sam"]).get(f"/api/tickets/{ticket.pk}").status_code == 200
    # The run bea started on it stays hers; her teammate bill no longer sees it.
    run = world.runs["billing"]
    assert bea.get(f"/api/runs/{run.pk}").status_code == 200
    assert api(world.users["bill"]).get(f"/api/runs/{run.pk}").status_code == 404


def test_the_same_ticket_again_from_another_team_is_refused(world: World) -> None:
    sue = world.users["sue"]
    sue.groups.add(ensure_roles()["operator"])  # may create tickets
    ticket = world.tickets["billing"]
    ticket.source, ticket.external_id = "api", "ext-1"
    ticket.save()
    answer = api(sue).post(
        "/api/tickets",
        {"external_id": "ext-1", "subject": "x", "body": "something new"},
        content_type="application/json",
    )
    assert answer.status_code == 403
    assert "another team" in answer.json()["error"]["message"]
    assert ticket.messages.count() == 1


@pytest.mark.parametrize("who", ["bea", "sam", "nia"])
def test_no_run_is_started_on_another_teams_ticket(world: World, who: str) -> None:
    client = api(world.users[who])
    for key, ticket in world.tickets.items():
        if key in SEES_TICKETS[who]:
            continue
        before = Run.objects.count()
        answer = client.post(
            "/api/runs", {"task": "x", "ticket": ticket.pk}, content_type="application/json"
        )
        assert answer.status_code == 404, f"{who} on {key}: {answer.status_code}"
        page = browser(world.users[who]).post(f"/tickets/{ticket.pk}/run/")
        assert page.status_code == 302 and "/runs/" not in page.headers["location"]
        assert Run.objects.count() == before


@pytest.mark.parametrize("who", sorted(PEOPLE))
def test_approvals_inbox_badge_and_api_show_ones_teams_only(world: World, who: str) -> None:
    user = world.users[who]
    visible = SEES_RUNS[who]
    listed = api(user).get("/api/approvals", {"status": "pending"}).json()["approvals"]
    assert {a["run"] for a in listed} == {world.runs[k].pk for k in visible}
    decidable = {k for k in visible if world.runs[k].created_by_id != user.pk}
    expected_badge = len(decidable) if PEOPLE[who] in ("approver", "admin") else 0
    assert pending_count(user) == expected_badge
    page = browser(user).get("/approvals/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-rendered="{expected_badge}"' in html
    for key, approval in world.approvals.items():
        decide_url = f"/approvals/{approval.pk}/decide/"
        if key not in visible:
            assert decide_url not in html, f"{who} sees {key}'s approval"
        elif key in decidable and expected_badge:
            assert decide_url in html, f"{who} misses {key}'s approval"


@pytest.mark.parametrize("who", ["bill", "sue", "nia"])
def test_deciding_another_teams_call_is_not_found_and_decides_nothing(
    world: World, who: str
) -> None:
    user = world.users[who]
    client = api(user)
    for key, approval in world.approvals.items():
        if key in SEES_RUNS[who]:
            continue
        answer = client.post(
            f"/api/approvals/{approval.pk}/decide",
            {"decision": "approve"},
            content_type="application/json",
        )
        assert answer.status_code == 404, f"{who} decides {key}: {answer.status_code}"
        page = browser(user).post(f"/approvals/{approval.pk}/decide/", {"decision": "approve"})
        assert page.status_code == 404
        assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_inside_a_team_roles_and_four_eyes_still_apply(world: World) -> None:
    u = world.users
    own = world.approvals["free_billing"]  # started by bea
    bea_says = api(u["bea"]).post(
        f"/api/approvals/{own.pk}/decide", {"decision": "approve"}, content_type="application/json"
    )
    assert bea_says.status_code == 403  # an operator decides nothing, even in her team
    bill_says = api(u["bill"]).post(
        f"/api/approvals/{own.pk}/decide", {"decision": "approve"}, content_type="application/json"
    )
    assert bill_says.status_code == 200
    # A teammate's run on a ticket that moved to another team's queue: bill no longer sees it.
    moved = world.approvals["moved"]
    assert (
        api(u["bill"])
        .post(
            f"/api/approvals/{moved.pk}/decide",
            {"decision": "approve"},
            content_type="application/json",
        )
        .status_code
        == 404
    )
    # The approver who started a run cannot decide its calls: sue's own run on her queue.
    sues = f.make_run(u["sue"], task="sue's own")
    sues.ticket = world.tickets["shipping"]
    sues.save(update_fields=["ticket"])
    f.emit(sues, {"type": "run_started", "data": {}})
    approval = f.request_approval(sues, call_id="c-sue")
    answer = api(u["sue"]).post(
        f"/api/approvals/{approval.pk}/decide",
        {"decision": "approve"},
        content_type="application/json",
    )
    assert answer.status_code == 403


def test_who_is_told_about_a_request(world: World) -> None:
    """``actions.deciders``: whom a notification goes to (the channels' mail and Slack)."""
    u = world.users

    def told(key: str) -> set[str]:
        return set(actions.deciders(world.approvals[key]).values_list("username", flat=True))

    assert told("billing") == {"bill", "ada"}
    assert told("shipping") == {"sue", "ada"}
    assert told("free_billing") == {"bill", "ada"}
    assert told("moved") == {"sue", "ada"}
    assert told("nobody") == set()  # ada started it; no team owns the queue
    assert told("child_shipping") == {"sue", "ada"}
    User.objects.create_superuser("root", "root@example.com", "pw-123456789")
    assert "root" in told("billing")
    u["sue"].is_active = False
    u["sue"].save()
    assert told("shipping") == {"ada", "root"}


def test_before_any_team_everyone_with_a_role_sees_everything(world: World) -> None:
    from agentweb.teams.models import Team

    Team.objects.all().delete()
    nia = world.users["nia"]
    listed = {r["id"] for r in api(nia).get("/api/runs").json()["runs"]}
    assert names(world, "runs", listed) >= ALL_RUNS - {"child_shipping"}
    tickets = {t["id"] for t in api(nia).get("/api/tickets").json()["tickets"]}
    assert names(world, "tickets", tickets) == set(world.tickets)
    assert set(actions.deciders(world.approvals["billing"]).values_list("username", flat=True)) == {
        "bill",
        "sue",
        "ada",
    }


# --- sockets ------------------------------------------------------------------------------


def _cookie(user: User) -> str:
    return f"sessionid={browser(user).cookies['sessionid'].value}"


@pytest.mark.parametrize("who", ["bea", "sue", "nia"])
async def test_run_sockets_refuse_another_teams_run(world: World, who: str) -> None:
    cookie = await sync_to_async(_cookie)(world.users[who])
    for key, run in world.runs.items():
        comm = communicator(f"/ws/runs/{run.pk}/", cookie)
        connected, code = await comm.connect()
        if key in SEES_RUNS[who]:
            assert connected, f"{who} {key}"
            first = await comm.receive_json_from(timeout=5)
            assert first["kind"] in ("events", "state")
        else:
            assert not connected and code == 4403, f"{who} {key}: {connected}, {code}"
        await comm.disconnect()


async def test_the_runs_list_socket_tells_only_of_ones_teams_runs(world: World) -> None:
    bea = await sync_to_async(_cookie)(world.users["bea"])
    sam = await sync_to_async(_cookie)(world.users["sam"])
    sockets: dict[str, WebsocketCommunicator] = {}
    for name, cookie in (("bea", bea), ("sam", sam)):
        sockets[name] = communicator("/ws/runs/", cookie)
        assert (await sockets[name].connect())[0]
    for key in ("shipping", "billing"):
        await sync_to_async(publish.run_status_now)(world.runs[key].pk, "running")
    # Each hears of their own team's run only (the other's status never reaches them).
    bea_heard = await sockets["bea"].receive_json_from(timeout=5)
    sam_heard = await sockets["sam"].receive_json_from(timeout=5)
    assert bea_heard["run"] == world.runs["billing"].pk
    assert sam_heard["run"] == world.runs["shipping"].pk
    assert await sockets["bea"].receive_nothing(timeout=0.5)
    assert await sockets["sam"].receive_nothing(timeout=0.5)
    for comm in sockets.values():
        await comm.disconnect()


async def test_the_approvals_socket_counts_ones_teams_only(world: World) -> None:
    for who, pending in (("bill", 2), ("sue", 4), ("ada", 6)):
        cookie = await sync_to_async(_cookie)(world.users[who])
        comm = communicator("/ws/approvals/", cookie)
        assert (await comm.connect())[0]
        message = await comm.receive_json_from(timeout=5)
        assert message == {"kind": "approvals", "pending": pending}, who
        await comm.disconnect()


@pytest.mark.parametrize("who", ["bea", "sam", "nia"])
async def test_ticket_sockets_refuse_and_never_tell_of_another_teams_ticket(
    world: World, who: str
) -> None:
    cookie = await sync_to_async(_cookie)(world.users[who])
    for key, ticket in world.tickets.items():
        comm = communicator(f"/ws/tickets/?ticket={ticket.pk}", cookie)
        connected, code = await comm.connect()
        if key in SEES_TICKETS[who]:
            assert connected, f"{who} {key}"
        else:
            assert not connected and code == 4403, f"{who} {key}: {connected}, {code}"
        await comm.disconnect()
    listing = communicator("/ws/tickets/", cookie)
    assert (await listing.connect())[0]
    for key in ("shipping", "billing", "nobody"):
        await sync_to_async(tickets.publish_changed)(world.tickets[key].pk)
    heard = []
    while not await listing.receive_nothing(timeout=0.5):
        heard.append((await listing.receive_json_from(timeout=5))["ticket"])
    assert names(world, "tickets", set(heard)) == SEES_TICKETS[who] - {"moved"}, who
    await listing.disconnect()
