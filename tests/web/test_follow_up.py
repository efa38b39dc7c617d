"""A succeeded run with an action rejected, failed or expired reads "Needs follow-up", in
the runs list, the ticket cards, the run page and live; ``?outcome=needs_follow_up`` finds
them on the page and in the API; the tool filter finds calls that were only asked for."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from agentweb.accounts.roles import ensure_roles
from agentweb.runs import actions
from agentweb.runs.follow_up import follow_up_filter, needs_follow_up, used_tool
from agentweb.runs.models import AgentProfile, Approval, Run, ToolExecution
from agentweb.tickets.models import Ticket
from tests.web import factories as f
from tests.web.test_consumers import _cookie, communicator

pytestmark = pytest.mark.django_db


@pytest.fixture
def people() -> dict[str, User]:
    groups = ensure_roles()
    users = {}
    for name in ("operator", "approver", "admin"):
        users[name] = User.objects.create_user(name, password="pw-123456789")
        users[name].groups.add(groups[name])
    return users


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def ran(run: Run, tool: str, status: str, call_id: str) -> None:
    ToolExecution.objects.create(
        run=run, call_id=call_id, tool=tool, arguments={"order_id": "A1"}, status=status
    )


def decided(run: Run, people: dict[str, User], tool: str, decision: str, call_id: str) -> None:
    approval = f.request_approval(run, tool=tool, call_id=call_id, arguments={"order_id": "A1"})
    if decision == "expired":
        Approval.objects.filter(pk=approval.pk).update(status="expired")
    elif decision == "cancelled":
        Approval.objects.filter(pk=approval.pk).update(status="cancelled")
    else:
        actions.do_decide_approval(
            approval_id=approval.pk, user=people["approver"], decision=decision, comment="no"
        )


def make(people: dict[str, User], name: str, status: str = "succeeded", **profile: Any) -> Run:
    agent, _ = AgentProfile.objects.get_or_create(
        name=f"p-{name}", defaults={"system_prompt": "x", **profile}
    )
    run = Run.objects.create(
        task=name, agent=agent, model="demo", created_by=people["operator"], status="running"
    )
    return run


def finish(run: Run, status: str = "succeeded") -> Run:
    f.emit(run, {"type": "run_finished", "data": {"final_answer": "Done."}}, status=status)
    return run


@pytest.fixture
def varied(people: dict[str, User]) -> dict[str, tuple[Run, bool]]:
    """Runs in every state the rule tells apart, with whether each needs follow-up."""
    out: dict[str, tuple[Run, bool]] = {}

    def case(name: str, expected: bool, status: str = "succeeded", **profile: Any) -> Run:
        run = make(people, name, **profile)
        out[name] = (run, expected)
        return run

    decided(case("rejected", True), people, "cancel_order", "reject", "c1")
    decided(case("expired", True), people, "issue_refund", "expired", "c1")
    run = case("approved-then-failed", True)
    decided(run, people, "issue_refund", "approve", "c1")
    ran(run, "issue_refund", "failed", "c1")
    ran(case("high-risk-failed-without-approval", True), "cancel_order", "failed", "c1")
    ran(case("low-risk-failed", False), "get_order", "failed", "c1")
    ran(
        case("low-risk-raised-to-medium-failed", True, risk_overrides={"get_order": "medium"}),
        "get_order",
        "failed",
        "c1",
    )
    ran(
        case("high-risk-lowered-failed", False, risk_overrides={"cancel_order": "low"}),
        "cancel_order",
        "failed",
        "c1",
    )
    ran(case("unknown-tool-failed", True), "crm__close", "failed", "c1")
    decided(case("cancelled", False), people, "cancel_order", "cancelled", "c1")
    run = case("all-done", False)
    decided(run, people, "cancel_order", "approve", "c1")
    ran(run, "cancel_order", "succeeded", "c1")
    decided(case("failed-run-rejected", False), people, "cancel_order", "reject", "c1")
    for name, (run, _) in out.items():
        finish(run, "failed" if name == "failed-run-rejected" else "succeeded")
    return out


def test_the_sql_filter_and_the_actions_agree(varied: dict[str, tuple[Run, bool]]) -> None:
    found = set(Run.objects.filter(follow_up_filter()).values_list("task", flat=True))
    for name, (run, expected) in varied.items():
        run.refresh_from_db()
        assert needs_follow_up(run.status, run.actions()) is expected, name
        assert (name in found) is expected, name


def test_the_runs_list_reads_needs_follow_up_and_filters_on_it(
    people: dict[str, User], varied: dict[str, tuple[Run, bool]]
) -> None:
    client = client_for(people["admin"])
    page = client.get("/runs/").content.decode()
    rejected = varied["rejected"][0]
    assert f'class="badge status-needs_follow_up" data-run-status="{rejected.pk}"' in page
    done = varied["all-done"][0]
    assert f'class="badge status-succeeded" data-run-status="{done.pk}">Succeeded<' in page
    page = client.get("/runs/?outcome=needs_follow_up").content.decode()
    shown = {name for name, (run, _) in varied.items() if f'href="/runs/{run.pk}/"' in page}
    assert shown == {name for name, (_, expected) in varied.items() if expected}
    assert '<option value="needs_follow_up" selected>Needs follow-up</option>' in page


def test_the_api_filters_on_the_outcome(
    people: dict[str, User], varied: dict[str, tuple[Run, bool]]
) -> None:
    client = client_for(people["admin"])
    runs = client.get("/api/runs?outcome=needs_follow_up&limit=200").json()["runs"]
    assert {r["task"] for r in runs} == {n for n, (_, expected) in varied.items() if expected}
    bad = client.get("/api/runs?outcome=fine")
    assert bad.status_code == 400 and "needs_follow_up" in bad.json()["error"]["message"]
    doc = client.get("/api/openapi.json").json()
    params = {p["name"]: p for p in doc["paths"]["/api/runs"]["get"]["parameters"]}
    assert params["outcome"]["schema"]["enum"] == ["needs_follow_up"]


def test_the_run_page_and_the_ticket_card_say_it(people: dict[str, User]) -> None:
    ticket = Ticket.objects.create(subject="Cancel my order", status="open")
    run = make(people, "on-ticket")
    run.ticket = ticket
    run.save(update_fields=["ticket"])
    decided(run, people, "cancel_order", "reject", "c1")
    finish(run)
    client = client_for(people["admin"])
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-status" class="badge status-needs_follow_up big"' in page
    assert ">Needs follow-up</span>" in page and "cancellation rejected" in page
    cards = client.get("/tickets/?status=open").content.decode()
    assert (
        f'<a href="/runs/{run.pk}/" class="badge status-needs_follow_up" '
        f'data-run-status="{run.pk}" data-prefix="#{run.pk} "'
    ) in cards
    assert f"#{run.pk} Needs follow-up</a>" in cards


def test_the_tool_filter_finds_calls_that_were_only_asked_for(people: dict[str, User]) -> None:
    asked = finish(make(people, "asked-and-rejected"))
    decided(asked, people, "cancel_order", "reject", "c1")
    refused = make(people, "refused-before-it-started")
    f.emit(refused, f.tool_finished(tool="cancel_order", ok=False, error="bad arguments"))
    other = make(people, "other")
    f.emit(other, f.tool_started(tool="get_order"))
    found = set(Run.objects.filter(used_tool("cancel_order")).values_list("task", flat=True))
    assert found == {"asked-and-rejected", "refused-before-it-started"}
    page = client_for(people["admin"]).get("/runs/?tool=cancel_order").content.decode()
    assert f'href="/runs/{asked.pk}/"' in page and f'href="/runs/{other.pk}/"' not in page


@pytest.mark.django_db(transaction=True)  # the consumer reads from its own threads
async def test_the_live_status_says_needs_follow_up(people: dict[str, User]) -> None:
    run = await sync_to_async(make)(people, "live")
    await sync_to_async(decided)(run, people, "cancel_order", "reject", "c1")
    comm = communicator("/ws/runs/", await sync_to_async(_cookie)(people["admin"]))
    assert (await comm.connect())[0]
    await sync_to_async(finish)(run)
    msg = await comm.receive_json_from(timeout=5)
    while msg.get("status") != "succeeded":
        msg = await comm.receive_json_from(timeout=5)
    assert msg == {
        "kind": "status",
        "run": run.pk,
        "status": "succeeded",
        "label": "Needs follow-up",
        "outcome": "needs_follow_up",
    }
    await comm.disconnect()
