"""Pages: who sees what, who may do what, and what each page shows."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from agentweb.accounts.roles import ensure_roles
from agentweb.runs.models import AgentProfile, Approval, Run
from agentweb.shop.models import Customer
from agentweb.tickets.models import Ticket
from tests.tickets.factories import make_ticket
from tests.web import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def people() -> dict[str, User]:
    groups = ensure_roles()
    users = {}
    for name in ("operator", "approver", "admin"):
        users[name] = User.objects.create_user(name, password="pw-123456789")
        users[name].groups.add(groups[name])
    users["outsider"] = User.objects.create_user("outsider", password="pw-123456789")
    return users


def client_for(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def runs(people: dict[str, User]) -> dict[str, Run]:
    """A run started by the operator and one started by the admin, both waiting for a
    refund approval."""
    out = {}
    for owner in ("operator", "admin"):
        run = f.make_run(people[owner], task=f"Refund for {owner}'s customer")
        f.emit(
            run,
            {"type": "run_started", "data": {}},
            f.model_called(),
            f.tool_started(),
            f.tool_finished(),
        )
        f.request_approval(run)
        out[owner] = run
    return out


PAGES = ["/tickets/", "/runs/", "/approvals/", "/runs/compare/", "/runs/import/"]


@pytest.mark.parametrize("path", PAGES)
def test_it_sends_anonymous_visitors_to_the_login_page(path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_serves_the_login_form() -> None:
    body = Client().get("/accounts/login/").content.decode()
    assert 'name="username"' in body and 'name="password"' in body


def test_it_logs_in_and_lands_on_tickets(people: dict[str, User]) -> None:
    client = Client()
    response = client.post("/accounts/login/", {"username": "operator", "password": "pw-123456789"})
    assert response.status_code == 302 and response["Location"] == "/tickets/"
    assert client.get("/tickets/").status_code == 200


# --- run page: role x owner ----------------------------------------------------------------

MATRIX = [
    ("operator", "operator", 200),
    ("operator", "admin", 200),
    ("approver", "operator", 200),
    ("approver", "admin", 200),
    ("admin", "operator", 200),
    ("admin", "admin", 200),
    # No role, no data (issue 12): refused outright, not merely "not found".
    ("outsider", "operator", 403),
    ("outsider", "admin", 403),
]


@pytest.mark.parametrize(("viewer", "owner", "status"), MATRIX)
@pytest.mark.parametrize("suffix", ["", "replay/", "export.json"])
def test_run_pages_follow_visibility(
    people: dict[str, User],
    runs: dict[str, Run],
    viewer: str,
    owner: str,
    status: int,
    suffix: str,
) -> None:
    response = client_for(people[viewer]).get(f"/runs/{runs[owner].pk}/{suffix}")
    assert response.status_code == status


def test_the_run_page_renders_each_event_with_its_seq(people: dict, runs: dict) -> None:
    body = client_for(people["operator"]).get(f"/runs/{runs['operator'].pk}/").content.decode()
    for seq in range(1, 6):
        assert body.count(f'id="event-{seq}"') == 1
    assert 'data-last-seq="5"' in body
    assert "Model · turn 1" in body


def test_the_run_page_escapes_model_and_tool_text(people: dict) -> None:
    run = f.make_run(people["operator"], task="<img src=x onerror=alert(1)>")
    f.emit(
        run,
        f.model_called(text="<script>alert('model')</script>"),
        f.tool_finished(result={"note": "<b>bold</b>"}),
    )
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    assert "<script>alert('model')</script>" not in body
    assert "&lt;script&gt;alert(&#x27;model&#x27;)&lt;/script&gt;" in body
    assert "<img src=x" not in body and "<b>bold</b>" not in body


@pytest.mark.parametrize(
    ("viewer", "owner", "can"),
    [
        ("operator", "operator", False),  # no permission
        ("operator", "admin", False),
        ("approver", "operator", True),
        ("approver", "admin", True),
        ("admin", "operator", True),
        ("admin", "admin", False),  # four-eyes: own run
    ],
)
def test_approval_buttons_follow_may_decide(
    people: dict, runs: dict, viewer: str, owner: str, can: bool
) -> None:
    body = client_for(people[viewer]).get(f"/runs/{runs[owner].pk}/").content.decode()
    assert ('value="approve"' in body) is can
    assert ("Waiting for an approver" in body) is not can


@pytest.mark.parametrize(
    ("viewer", "owner", "outcome"),
    [
        ("operator", "admin", "pending"),
        ("approver", "operator", "approved"),
        ("admin", "admin", "pending"),
        ("admin", "operator", "approved"),
        ("outsider", "operator", 403),
    ],
)
def test_deciding_follows_the_rules(
    people: dict, runs: dict, viewer: str, owner: str, outcome: Any
) -> None:
    approval = Approval.objects.get(run=runs[owner])
    response = client_for(people[viewer]).post(
        f"/approvals/{approval.pk}/decide/", {"decision": "approve", "next": "/approvals/"}
    )
    if outcome == 403:
        assert response.status_code == 403
        approval.refresh_from_db()
        assert approval.status == "pending"
        return
    assert response.status_code == 302 and response["Location"] == "/approvals/"
    approval.refresh_from_db()
    assert approval.status == outcome


def test_edit_and_approve_checks_the_json(people: dict, runs: dict) -> None:
    approval = Approval.objects.get(run=runs["operator"])
    client = client_for(people["approver"])
    response = client.post(
        f"/approvals/{approval.pk}/decide/",
        {"decision": "edit", "arguments": "{not json"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert "not valid JSON" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == "pending"
    from tests.shop.conftest import make_customer, make_order

    make_order(make_customer(), "A1001")  # the refund's own check reads the order
    edited = {"order_id": "A1001", "amount": -5, "reason": "partial refund"}
    response = client.post(
        f"/approvals/{approval.pk}/decide/",
        {"decision": "edit", "arguments": json.dumps(edited)},
        HTTP_HX_REQUEST="true",
    )
    assert "must be positive" in response.content.decode()  # the tool's rules, not types
    approval.refresh_from_db()
    assert approval.status == "pending"
    edited = {"order_id": "A1001", "amount": 10.0, "reason": "partial refund"}
    response = client.post(
        f"/approvals/{approval.pk}/decide/",
        {"decision": "edit", "arguments": json.dumps(edited)},
        HTTP_HX_REQUEST="true",
    )
    approval.refresh_from_db()
    assert approval.status == "approved", response.content.decode()
    assert approval.edited_arguments["amount"] == 10.0


def test_reject_with_reason(people: dict, runs: dict) -> None:
    approval = Approval.objects.get(run=runs["operator"])
    client_for(people["approver"]).post(
        f"/approvals/{approval.pk}/decide/", {"decision": "reject", "comment": "Too much"}
    )
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.comment == "Too much"


def test_the_decide_redirect_stays_on_this_site(people: dict, runs: dict) -> None:
    approval = Approval.objects.get(run=runs["operator"])
    response = client_for(people["approver"]).post(
        f"/approvals/{approval.pk}/decide/", {"decision": "reject", "next": "https://evil.example/"}
    )
    assert response["Location"] == f"/runs/{runs['operator'].pk}/"


def test_the_approvals_inbox_lists_pending_oldest_first(people: dict, runs: dict) -> None:
    Approval.objects.filter(run=runs["admin"]).update(
        requested_at=timezone.now() - timedelta(hours=1)
    )
    body = client_for(people["approver"]).get("/approvals/").content.decode()
    first = body.index(f'id="inbox-{Approval.objects.get(run=runs["admin"]).pk}"')
    second = body.index(f'id="inbox-{Approval.objects.get(run=runs["operator"]).pk}"')
    assert first < second
    assert "issue_refund" in body and "high risk" in body
    partial = client_for(people["approver"]).get("/approvals/?partial=1").content.decode()
    assert "<html" not in partial and "issue_refund" in partial


def test_the_recently_decided_list_follows_decisions_live(people: dict, runs: dict) -> None:
    """The page's decided list is a live region of its own (it was outside the refreshed
    pending list: a decision made on the page showed there only after a reload)."""
    approver = client_for(people["approver"])
    page = approver.get("/approvals/").content.decode()
    assert 'id="approvals-recent"' in page and "?partial=recent" in page
    assert "Recently decided" not in page  # nothing decided yet
    approval = Approval.objects.get(run=runs["operator"])
    response = approver.post(
        f"/approvals/{approval.pk}/decide/",
        {"decision": "reject", "comment": "Not this one"},
        HTTP_HX_REQUEST="true",
    )
    approval.refresh_from_db()
    assert approval.status == "rejected", response.content.decode()
    recent = approver.get("/approvals/?partial=recent").content.decode()
    assert "<html" not in recent and "Recently decided" in recent
    assert f'href="/runs/{runs["operator"].pk}/"' in recent and "Rejected" in recent
    pending = approver.get("/approvals/?partial=1").content.decode()
    assert f'id="inbox-{approval.pk}"' not in pending


def test_the_inbox_hides_runs_the_user_may_not_see(people: dict, runs: dict) -> None:
    response = client_for(people["outsider"]).get("/approvals/")
    assert response.status_code == 403 and "no role" in response.content.decode()
    assert "issue_refund" not in response.content.decode()


def test_the_nav_counts_pending_approvals(people: dict, runs: dict) -> None:
    body = client_for(people["approver"]).get("/runs/").content.decode()
    assert 'id="nav-pending" class="count"' in body and ">2</span>" in body


# --- tickets and starting runs -------------------------------------------------------------


@pytest.fixture
def ticket() -> Ticket:
    customer = Customer.objects.create(
        code="C900", name="Ada Example", email="ada@example.com", created_at=timezone.now()
    )
    return make_ticket("Where is my parcel?", "Order A9 has not arrived.", customer=customer)


def test_tickets_show_customer_context_and_start_a_run(
    people: dict, ticket: Ticket, django_capture_on_commit_callbacks: Any
) -> None:
    AgentProfile.objects.get_or_create(name="ticket-assistant", defaults={"system_prompt": "x"})
    client = client_for(people["operator"])
    body = client.get("/tickets/").content.decode()
    assert "Where is my parcel?" in body and "Ada Example" in body and "C900" in body
    assert f"/tickets/{ticket.pk}/run/" in body
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(f"/tickets/{ticket.pk}/run/")
    run = Run.objects.get(ticket=ticket)
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.created_by == people["operator"]
    assert callbacks, "the run is enqueued after commit"


def test_the_task_form_starts_a_run(people: dict, django_capture_on_commit_callbacks: Any) -> None:
    AgentProfile.objects.get_or_create(name="ticket-assistant", defaults={"system_prompt": "x"})
    with django_capture_on_commit_callbacks(execute=False):
        response = client_for(people["operator"]).post("/runs/new/", {"task": "Check KIT-0101"})
    run = Run.objects.get(task="Check KIT-0101")
    assert response["Location"] == f"/runs/{run.pk}/"


def test_an_empty_task_is_refused(people: dict) -> None:
    client = client_for(people["operator"])
    response = client.post("/runs/new/", {"task": "   "}, follow=True)
    assert '<li class="flash-error">This field is required.</li>' in response.content.decode()
    assert not Run.objects.exists()


def test_people_without_a_role_cannot_start_runs(people: dict, ticket: Ticket) -> None:
    client_for(people["outsider"]).post(f"/tickets/{ticket.pk}/run/")
    client_for(people["outsider"]).post("/runs/new/", {"task": "hello"})
    assert not Run.objects.exists()


def test_cancel_from_the_run_page(people: dict, runs: dict) -> None:
    client_for(people["operator"]).post(f"/runs/{runs['operator'].pk}/cancel/")
    runs["operator"].refresh_from_db()
    assert runs["operator"].status == "cancelled"
    client_for(people["outsider"]).post(f"/runs/{runs['admin'].pk}/cancel/")
    runs["admin"].refresh_from_db()
    assert runs["admin"].status == "waiting_approval"


# --- runs list --------------------------------------------------------------------------------


def test_runs_search(people: dict, runs: dict) -> None:
    other = f.make_run(people["approver"], task="Cancel order A1008", status="succeeded")
    f.emit(other, f.tool_started(tool="cancel_order", arguments={"order_id": "A1008"}))
    Run.objects.filter(pk=other.pk).update(created_at=timezone.now() - timedelta(days=10))
    client = client_for(people["admin"])

    def found(query: str) -> set[int]:
        body = client.get(f"/runs/?{query}").content.decode()
        return {r.pk for r in Run.objects.all() if f'href="/runs/{r.pk}/"' in body}

    everyone = {runs["operator"].pk, runs["admin"].pk, other.pk}
    assert found("") == everyone
    assert found("q=cancel+order") == {other.pk}
    assert found("tool=cancel_order") == {other.pk}
    assert found("tool=get_order") == {runs["operator"].pk, runs["admin"].pk}
    assert found("status=succeeded") == {other.pk}
    assert found("requester=operator") == {runs["operator"].pk}
    assert found("agent=ticket-assistant") == everyone
    day = (timezone.now() - timedelta(days=10)).date().isoformat()
    assert found(f"since={day}&until={day}") == {other.pk}
    assert found(f"until={day}") == {other.pk}


def test_runs_pagination_and_htmx_partial(people: dict) -> None:
    for i in range(30):
        f.make_run(people["operator"], task=f"task {i}")
    client = client_for(people["operator"])
    first = client.get("/runs/").content.decode()
    assert "page 1 of 2" in first and "Older" in first
    second = client.get("/runs/?page=2").content.decode()
    assert second.count('data-run-status="') == 5
    partial = client.get("/runs/?page=2", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="runs-table")
    assert "<html" not in partial.content.decode()


def test_outsiders_see_no_runs_not_even_their_own(people: dict, runs: dict) -> None:
    # No role, no data (issue 12): a run started while the user still had a role stays
    # out of sight once the role is gone.
    mine = f.make_run(people["outsider"], task="my own task")
    response = client_for(people["outsider"]).get("/runs/")
    body = response.content.decode()
    assert response.status_code == 403 and "no role" in body
    assert f'href="/runs/{mine.pk}/"' not in body
    assert f'href="/runs/{runs["operator"].pk}/"' not in body


# --- replay, compare, export, import -----------------------------------------------------------


def finished_run(user: User, refund: float) -> Run:
    run = f.make_run(user, task="Refund a damaged kettle")
    f.emit(
        run,
        {"type": "run_started", "data": {}},
        f.model_called(text="Looking up the order."),
        f.tool_started(),
        f.tool_finished(),
        f.model_called(
            text="Refunding.",
            tool="issue_refund",
            call_id="c2",
            arguments={"order_id": "A1001", "amount": refund, "reason": "damaged"},
        ),
        f.tool_started(
            tool="issue_refund",
            call_id="c2",
            arguments={"order_id": "A1001", "amount": refund, "reason": "damaged"},
        ),
        f.tool_finished(tool="issue_refund", call_id="c2", result={"refunded": refund}),
        f.model_called(text="Done.", tool=""),
        {"type": "run_finished", "data": {"final_answer": f"Refunded {refund}"}},
        status=Run.Status.SUCCEEDED,
    )
    Run.objects.filter(pk=run.pk).update(final_answer=f"Refunded {refund}")
    run.refresh_from_db()
    return run


def test_replay_shows_what_the_model_saw(people: dict) -> None:
    run = finished_run(people["operator"], 20)
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/replay/").content.decode()
    assert body.count('class="ctx-msg') == 6  # task, 3 assistant turns, 2 tool results
    assert 'id="replay-ctx"' in body
    ctx = json.loads(
        body.split('id="replay-ctx" type="application/json">')[1].split("</script>")[0]
    )
    # Seq 2 (first model call) saw only the task; seq 5 (second call) saw task, turn 1, result.
    assert ctx[1] == 1 and ctx[4] == 3 and len(ctx) == 9
    for seq in range(1, 10):
        assert f'id="event-{seq}"' in body


def test_compare_aligns_calls_and_marks_differences(people: dict) -> None:
    a = finished_run(people["operator"], 20)
    b = finished_run(people["operator"], 35)
    body = client_for(people["operator"]).get(f"/runs/compare/?a={a.pk}&b={b.pk}").content.decode()
    assert body.count('class="cmp-row"') == 2
    assert "args differ" in body and "result differs" in body
    assert "1 with differences" in body and "final answers differ" in body


def test_compare_pairs_model_turns_with_tokens_cost_and_time_and_keeps_a_rejected_call(
    people: dict,
) -> None:
    approved = finished_run(people["operator"], 20)
    rejected = f.make_run(people["operator"], task="Refund a damaged kettle")
    arguments = {"order_id": "A1001", "amount": 20, "reason": "damaged"}
    slow = f.model_called(text="Looking up the order.")
    slow["data"].update(latency_ms=480, tokens={"input": 910, "output": 55})
    f.emit(
        rejected,
        {"type": "run_started", "data": {}},
        slow,
        f.tool_started(),
        f.tool_finished(),
        f.model_called(text="Refunding.", tool="issue_refund", call_id="c2", arguments=arguments),
        {
            "type": "approval_requested",
            "data": {
                "call_id": "c2",
                "tool": "issue_refund",
                "arguments": arguments,
                "risk": "high",
                "reason": "high_risk",
            },
        },
        {
            "type": "approval_decided",
            "data": {
                "call_id": "c2",
                "decision": "rejected",
                "comment": "Wrong order",
                "arguments": None,
                "tool": "issue_refund",
                "edited": False,
                "by": "approver",
            },
        },
        f.model_called(text="I could not refund it.", tool=""),
        {"type": "run_finished", "data": {"final_answer": "No refund"}},
        status=Run.Status.SUCCEEDED,
    )
    body = (
        client_for(people["operator"])
        .get(f"/runs/compare/?a={approved.pk}&b={rejected.pk}")
        .content.decode()
    )
    # three model turns on each side, paired, each with its tokens, cost and time
    assert body.count('class="cmp-turn"') == 3
    turns = body.split('class="cmp-turn"')[1].split("</tr>")[0]
    assert turns.count("Model · turn 1") == 2
    assert "350 in" in turns and "910 in" in turns and "120 ms" in turns and "480 ms" in turns
    last = body.split('class="cmp-turn"')[3].split("</tr>")[0]
    assert "Done." in last and "I could not refund it." in last and "reply differs" in last
    # the rejected refund is beside the one that ran, with the reason it did not
    calls = body.split('class="cmp-row"')
    assert len(calls) == 3
    refund = calls[2].split("</tr>")[0]
    assert "rejected · not run" in refund and "not run: rejected: Wrong order" in refund
    assert "result differs" in refund
    # totals side by side
    totals = body.split('class="cmp-totals"')[1].split("</tr>")[0]
    plain = re.sub(r"<[^>]+>", "", totals)
    assert "1050 in / 120 out" in plain and "1610 in / 135 out" in plain, plain
    assert "model 360 ms" in plain and "model 720 ms" in plain
    assert "2 tool calls (1 not run)" in totals


def test_export_then_import_round_trip(people: dict) -> None:
    run = finished_run(people["operator"], 20)
    client = client_for(people["operator"])
    response = client.get(f"/runs/{run.pk}/export.json")
    doc = json.loads(response.content)
    assert doc["schema"] == "agentweb.run-export/1"
    assert [e["seq"] for e in doc["events"]] == list(range(1, 10))
    assert doc["run"]["id"] == run.pk and doc["run"]["final_answer"] == "Refunded 20"
    upload = io.BytesIO(response.content)
    upload.name = "run.json"
    body = client.post("/runs/import/", {"file": upload}).content.decode()
    assert "Imported file" in body and 'id="event-9"' in body and "Refunded 20" in body


def test_import_refuses_other_files(people: dict) -> None:
    client = client_for(people["operator"])
    refusals = {
        b"not json": "not a file we can show: not valid JSON",
        b'{"schema": "other"}': "not an agentweb export (expected &quot;schema&quot;: "
        "&quot;agentweb.run-export/1&quot;)",
        b'{"schema": "agentweb.run-export/1"}': "an export needs a &quot;run&quot; object "
        "and an &quot;events&quot; list",
        b'{"schema": "agentweb.run-export/1", "run": {}, "events": [{"seq": "x", "type": "a"}]}': (
            "event 0 has a seq that is not a number"
        ),
        b'{"schema": "agentweb.run-export/1", "run": {}, "events": [{"seq": 1}]}': (
            "event 0 lacks seq or type"
        ),
    }
    for content, message in refusals.items():
        upload = io.BytesIO(content)
        upload.name = "x.json"
        response = client.post("/runs/import/", {"file": upload})
        body = response.content.decode()
        assert response.status_code == 422
        assert f'<p class="error">{message}' in body, content
        assert "Imported file" not in body


# --- agents -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("role", "status"), [("operator", 403), ("approver", 403), ("admin", 200)])
def test_agents_are_for_admins(people: dict, role: str, status: int) -> None:
    profile = AgentProfile.objects.create(name="helper", system_prompt="Be brief.")
    client = client_for(people[role])
    assert client.get("/agents/").status_code == status
    assert client.get(f"/agents/{profile.pk}/").status_code == status
    nav = client.get("/tickets/").content.decode()
    assert ('href="/agents/"' in nav) is (status == 200)


def test_admins_edit_agent_profiles(people: dict) -> None:
    profile = AgentProfile.objects.create(name="helper", system_prompt="Be brief.")
    client = client_for(people["admin"])
    data = {
        "description": "Short answers",
        "model": "",
        "system_prompt": "Be very brief.",
        "allowed_tools": '["get_order"]',
        "max_iterations": 5,
        "risk_overrides": '{"get_order": "medium"}',
        "approval_policies": "{}",
        "context_budget_tokens": 8000,
    }
    assert client.post(f"/agents/{profile.pk}/", data).status_code == 302
    profile.refresh_from_db()
    assert profile.allowed_tools == ["get_order"] and profile.max_iterations == 5
    bad = {**data, "risk_overrides": '{"get_order": "extreme"}', "max_iterations": 7}
    response = client.post(f"/agents/{profile.pk}/", bad)
    body = response.content.decode()
    assert response.status_code == 422
    field = body.split('id="field-risk_overrides"', 1)[1].split('<div class="field', 1)[0]
    assert '<p class="error">an object of tool: &quot;low&quot;' in field
    profile.refresh_from_db()
    assert profile.max_iterations == 5 and profile.risk_overrides == {"get_order": "medium"}


def test_the_run_page_shows_what_the_model_saw(people: dict) -> None:
    run = f.make_run(people["operator"])
    event = f.model_called()
    event["data"]["context"] = {
        "budget": 16000,
        "tokens": 2063,
        "over_budget": False,
        "counter": "estimate",
        "layers": [
            {"layer": "system", "messages": 1, "tokens": 383},
            {"layer": "facts", "items": 3, "sent": True, "tokens": 40},
            {"layer": "summary", "covers": 4, "by": "model", "sent": True, "tokens": 90},
            {"layer": "window", "messages": 2, "digests": 1, "tokens": 287, "from": 5},
        ],
        "messages": [0, 1, None, 5, 6],
        "tools": {
            "allowed": 14,
            "offered": ["get_order", "<b>x</b>"],
            "ranked": True,
            "tokens": 300,
        },
    }
    f.emit(
        run,
        {
            "type": "context_compacted",
            "data": {
                "tokens_before": 17000,
                "tokens_after": 9000,
                "budget": 16000,
                "actions": ["evicted"],
                "evicted": {"steps": 4},
            },
        },
        event,
    )
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    assert "What the model saw" in body
    assert "2063 of 16000 tokens" in body
    assert "2 of 14 tools" in body
    assert "3 pinned facts" in body and "4 earlier steps by model" in body
    assert "2 messages, 1 digested" in body
    assert "17000 → 9000 tokens" in body
    assert "<b>x</b>" not in body and "&lt;b&gt;x&lt;/b&gt;" in body


def test_the_ticket_inbox_shows_what_is_remembered_about_the_customer(people: dict) -> None:
    from agentweb.shop.models import CustomerFact

    customer = Customer.objects.create(
        code="C900", name="Mia", email="m@example.com", created_at=timezone.now()
    )
    make_ticket("Where is it", "?", customer=customer)
    CustomerFact.objects.create(
        customer=customer,
        key="preferred_contact",
        value="<i>email</i> only",
        updated_at=timezone.now(),
    )
    body = client_for(people["operator"]).get("/tickets/").content.decode()
    assert "preferred_contact:" in body
    assert "&lt;i&gt;email&lt;/i&gt; only" in body


def test_approval_reasons_are_said_in_words(people: dict) -> None:
    run = f.make_run(people["operator"], status="waiting_approval")
    f.emit(
        run,
        {
            "type": "approval_requested",
            "data": {
                "call_id": "c9",
                "tool": "issue_refund",
                "arguments": {"order_id": "A1"},
                "risk": "high",
                "reason": "unknown_outcome",
            },
        },
    )
    body = client_for(people["approver"]).get(f"/runs/{run.pk}/").content.decode()
    assert "an earlier attempt stopped mid-call" in body


# --- API tokens in the browser -------------------------------------------------------------


def test_tokens_are_created_with_a_name_shown_once_and_work_on_the_api(people: dict) -> None:
    client = client_for(people["operator"])
    response = client.post("/account/tokens/", {"name": "nightly <script>"})
    assert response.status_code == 302 and response["Location"] == "/account/tokens/"
    page = client.get("/account/tokens/").content.decode()
    raw = page.split('id="new-token" class="mono" readonly value="', 1)[1].split('"', 1)[0]
    assert raw.startswith("aw_")
    assert "nightly &lt;script&gt;" in page and "<script>" not in page.split("<body", 1)[1]
    assert "never" in page  # not used yet
    # Shown once: the next visit has no raw token left.
    again = client.get("/account/tokens/").content.decode()
    assert raw not in again and "nightly &lt;script&gt;" in again
    # It works on the API as the operator, and the list then says when it was last used.
    api = Client().get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.status_code == 200
    listed = client.get("/account/tokens/").content.decode()
    assert "just now" in listed.split("Last used", 1)[1]


def test_a_token_needs_a_name(people: dict) -> None:
    from agentweb.accounts.models import ApiToken

    client = client_for(people["operator"])
    response = client.post("/account/tokens/", {"name": "   "})
    assert response.status_code == 400 and "Give the token a name" in response.content.decode()
    assert client.post("/account/tokens/", {"name": "x" * 101}).status_code == 400
    assert not ApiToken.objects.exists()


def test_revoking_a_token_stops_it_and_only_ones_own(people: dict) -> None:
    from agentweb.accounts.models import ApiToken

    raw = ApiToken.issue(people["operator"], name="ci")
    token = ApiToken.objects.get()
    # Another person cannot revoke it (and learns nothing about it).
    other = client_for(people["approver"])
    assert other.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert ApiToken.objects.filter(pk=token.pk).exists()
    assert "ci" not in other.get("/account/tokens/").content.decode().split("Your tokens", 1)[1]
    owner = client_for(people["operator"])
    page = owner.get("/account/tokens/").content.decode()
    assert f'action="/account/tokens/{token.pk}/revoke/"' in page and ">Revoke</button>" in page
    assert owner.get(f"/account/tokens/{token.pk}/revoke/").status_code == 405  # POST only
    owner.post(f"/account/tokens/{token.pk}/revoke/")
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert Client().get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_the_user_menu_links_to_tokens_and_log_out(people: dict) -> None:
    body = client_for(people["operator"]).get("/tickets/").content.decode()
    menu = body.split('class="usermenu-items"', 1)[1].split("</div>", 1)[0]
    assert 'href="/account/tokens/"' in menu and "Log out" in menu
    assert 'class="menu-toggle"' in body


# --- error pages in the app's layout (under DEBUG too) ------------------------------------------


def _is_app_error_page(response: Any, status: int) -> bool:
    body = response.content.decode()
    return (
        response.status_code == status
        and f'data-status="{status}"' in body
        and 'class="topbar"' in body
        and "DEBUG = True" not in body
        and "URLconf" not in body
    )


@pytest.mark.parametrize("debug", [True, False])
def test_error_pages_use_the_layout_with_and_without_debug(
    people: dict, runs: dict, settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    operator = client_for(people["operator"])
    assert _is_app_error_page(operator.get("/agents/"), 403)
    assert _is_app_error_page(operator.get("/runs/999999/"), 404)
    assert _is_app_error_page(operator.get("/no/such/page/"), 404)
    not_allowed = operator.get("/runs/new/")
    assert _is_app_error_page(not_allowed, 405) and not_allowed["Allow"] == "POST"
    # The API keeps its JSON.
    api = operator.get("/api/runs/999999")
    assert api.status_code == 404 and api["Content-Type"].startswith("application/json")
    # A missing trailing slash still redirects.
    assert operator.get("/runs").status_code == 301


def test_a_crash_is_a_500_page_in_the_layout_even_with_debug(
    people: dict, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentweb.web import views

    settings.DEBUG = True

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(views, "_registered_tools", boom)
    client = client_for(people["operator"])
    client.raise_request_exception = False
    response = client.get("/runs/")
    assert _is_app_error_page(response, 500)
    assert "secret internals" not in response.content.decode()


def test_compare_with_an_unknown_run_says_so_inline(people: dict, runs: dict) -> None:
    response = client_for(people["operator"]).get(
        f"/runs/compare/?a={runs['operator'].pk}&b=999999"
    )
    body = response.content.decode()
    assert response.status_code == 404
    assert "Run #999999 does not exist" in body and 'name="b"' in body
    assert "URLconf" not in body


# --- what is waiting for me ------------------------------------------------------------------


def test_the_badge_counts_only_what_this_person_may_decide(people: dict, runs: dict) -> None:
    def badge(user: User) -> str:
        body = client_for(user).get("/runs/").content.decode()
        return body.split('id="nav-pending"', 1)[1].split("</span>", 1)[0]

    # Operators decide nothing: no badge at all (zero is hidden).
    assert badge(people["operator"]).endswith(">0") and 'class="count zero"' in badge(
        people["operator"]
    )
    assert badge(people["approver"]).endswith(">2")
    # The admin started one of the two runs: four-eyes, only the other counts.
    assert badge(people["admin"]).endswith(">1")
    from agentweb.web.context import pending_count

    assert pending_count(people["admin"]) == 1 and pending_count(people["outsider"]) == 0


@pytest.mark.parametrize(
    ("role", "lands"),
    [("operator", "/tickets/"), ("approver", "/approvals/"), ("admin", "/tickets/")],
)
def test_people_land_on_their_start_page(people: dict, role: str, lands: str) -> None:
    client = Client()
    response = client.post("/accounts/login/", {"username": role, "password": "pw-123456789"})
    assert response.status_code == 302 and response["Location"] == lands
    assert client.get("/").headers["Location"] == lands


# --- outcomes beside the status --------------------------------------------------------------


@pytest.fixture
def settled_run(people: dict, ticket: Ticket) -> Run:
    """A run that succeeded although its cancellation was rejected; its refund ran."""
    from agentweb.runs.models import ToolExecution

    run = f.make_run(people["operator"], task="Cancel or refund")
    run.ticket = ticket
    run.save(update_fields=["ticket"])
    cancel = f.request_approval(
        run, tool="cancel_order", call_id="c-cancel", arguments={"order_id": "A9", "reason": "x"}
    )
    client_for(people["approver"]).post(
        f"/approvals/{cancel.pk}/decide/", {"decision": "reject", "comment": "Already shipped"}
    )
    ToolExecution.objects.create(
        run=run,
        call_id="c-refund",
        tool="issue_refund",
        arguments={"order_id": "A9", "amount": 38, "reason": "late"},
        status=ToolExecution.Status.SUCCEEDED,
        result={"refund": "R1"},
    )
    f.emit(run, {"type": "run_finished", "data": {"final_answer": "Done."}}, status="succeeded")
    return run


def test_outcomes_show_beside_the_status_everywhere(people: dict, settled_run: Run) -> None:
    client = client_for(people["operator"])
    pages = {
        "run": client.get(f"/runs/{settled_run.pk}/").content.decode(),
        "runs": client.get("/runs/").content.decode(),
        "ticket": client.get("/tickets/").content.decode(),
    }
    for name, body in pages.items():
        # A rejected action: the run reads "Needs follow-up", not a green "Succeeded".
        assert "Needs follow-up</" in body and "badge status-succeeded" not in body, name
        assert (
            'class="outcome outcome-bad" data-action-status="rejected">cancellation rejected<'
            in (body)
        ), name
        assert 'data-action-status="executed"' in body and ">refund 38.00 issued<" in body, name


def test_operators_see_waiting_on_approver(people: dict, runs: dict) -> None:
    client = client_for(people["operator"])
    body = client.get("/runs/").content.decode()
    assert ">Waiting on approver</span>" in body
    run_page = client.get(f"/runs/{runs['operator'].pk}/").content.decode()
    assert ">Waiting on approver</span>" in run_page
    assert ">refund 25.00 waiting on approver<" in run_page


def test_outcome_words_for_odd_arguments() -> None:
    from agentweb.web.outcome import describe

    refund = {"tool": "issue_refund", "status": "failed", "approved_by": "person"}
    assert describe(refund, {"amount": "NaN"}).text == "refund failed"
    assert describe(refund, {"amount": "12.5"}).text == "refund 12.50 failed"
    assert describe(refund, None).text == "refund failed"
    odd = {"tool": "frobnicate_widget", "status": "expired", "approved_by": None}
    assert describe(odd).text == "frobnicate widget expired (nobody decided)"
    assert describe(odd).tone == "bad"


# --- approvals people can audit ---------------------------------------------------------------


def test_an_edited_approval_shows_what_changed(people: dict) -> None:
    from tests.shop.conftest import make_customer, make_order

    make_order(make_customer(), "A1001", price="149.00")  # the refund's check reads it
    run = f.make_run(people["operator"], task="Refund")
    approval = f.request_approval(
        run, arguments={"order_id": "A1001", "amount": 149.0, "reason": "broken"}
    )
    approver = client_for(people["approver"])
    response = approver.post(
        f"/approvals/{approval.pk}/decide/",
        {
            "decision": "edit",
            "arguments": json.dumps({"order_id": "A1001", "amount": 100.0, "reason": "broken"}),
        },
        HTTP_HX_REQUEST="true",
    )
    approval.refresh_from_db()
    assert approval.status == "approved", response.content.decode()
    diff = "<code>amount</code> <del>149.00</del> → <ins>100.00</ins>"
    assert diff in client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    recent = approver.get("/approvals/").content.decode().split("Recently decided", 1)[1]
    assert diff in recent
    # Unchanged arguments are not listed.
    assert "<code>order_id</code>" not in recent


def test_an_auto_approved_call_says_which_policy_allowed_it(people: dict) -> None:
    run = f.make_run(people["operator"])
    started = f.tool_started(tool="add_customer_note", risk="medium")
    started["data"]["approval"] = {
        "by": "policy",
        "reason": "policy 'notes are fine' allows <add_customer_note>",
    }
    f.emit(run, started)
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    assert "auto-approved" in body
    assert "policy &#x27;notes are fine&#x27; allows &lt;add_customer_note&gt;" in body


# --- run page details ---------------------------------------------------------------------------


def test_the_final_answer_is_shown_once(people: dict) -> None:
    run = f.make_run(people["operator"])
    answer = "Your refund of 38.00 is on its way."
    f.emit(
        run,
        f.model_called(text=answer, tool=""),
        {"type": "run_finished", "data": {"final_answer": answer}},
        status="succeeded",
    )
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    assert body.count(answer) == 1
    assert "Wrote the final answer" in body


def test_a_turn_that_was_sent_back_keeps_its_text(people: dict) -> None:
    run = f.make_run(people["operator"])
    f.emit(
        run,
        f.model_called(text="Done, probably.", tool=""),
        {"type": "completion_objected", "data": {"validator": "v", "reason": "no"}},
        f.model_called(text="Refund issued.", tool=""),
        {"type": "run_finished", "data": {"final_answer": "Refund issued."}},
        status="succeeded",
    )
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    assert "Done, probably." in body and body.count("Refund issued.") == 1


def test_prices_come_from_one_table_and_unknown_models_show_a_dash(people: dict) -> None:
    from agentweb.runs.pricing import cost_usd
    from agentweb.web import timeline

    known = f.model_called()
    known["data"]["model"] = "openai:gpt-4o-mini"
    assert timeline.step_cost(known["data"], "") == cost_usd(
        "openai:gpt-4o-mini", {"input": 350, "output": 40}
    )
    run = f.make_run(people["operator"])
    run.model = "openai:mystery-9"
    run.save(update_fields=["model"])
    unknown = f.model_called()
    unknown["data"]["model"] = "openai:mystery-9"
    f.emit(run, unknown)
    assert timeline.step_cost(unknown["data"], "") is None
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    assert "350 in / 40 out · —" in body
    cost = body.split("<dt>Cost</dt>", 1)[1].split("</dd>", 1)[0]
    assert "—" in cost and "$" not in cost
    # What the engine stored wins over the table (an unknown model stored as null).
    stored = f.model_called()
    stored["data"].update(model="openai:gpt-4o", cost_usd=None)
    assert timeline.step_cost(stored["data"], "") is None


def test_short_times_read_like_people_say_them(people: dict) -> None:
    from agentweb.web.templatetags.agentweb_ui import ago, duration, seconds, since

    now = timezone.now()
    assert ago(now) == "just now" and ago(now - timedelta(seconds=59)) == "just now"
    assert ago(now - timedelta(minutes=1)) == "1 minute ago"
    assert ago(now - timedelta(hours=3)) == "3 hours ago"
    assert ago(now + timedelta(seconds=5)) == "just now"  # a clock slightly ahead
    assert since(now, now) == "<1s" and since(now - timedelta(seconds=5), now) == "5s"
    assert (
        duration(74_000) == "1m 14s"
        and duration(400) == "<1s"
        and duration("x") == "—"
        and duration("inf") == "—"
    )
    assert seconds(200) == "0.2 s" and seconds(float("nan")) == "—"


def test_cancel_asks_first_and_results_sit_under_their_calls(people: dict) -> None:
    run = f.make_run(people["operator"])
    finished = f.tool_finished()
    finished["data"]["duration_ms"] = 200
    f.emit(run, f.tool_started(), finished)
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    assert 'data-confirm="Cancel run #' in body
    assert "+0.2 s" in body and "↳" in body


def test_the_timing_strip_shows_the_wait_for_approval(people: dict) -> None:
    from agentweb.runs.models import RunEvent

    run = f.make_run(people["operator"])
    f.emit(run, f.model_called())
    approval = f.request_approval(run)
    RunEvent.objects.filter(run=run, type="approval_requested").update(
        at=timezone.now() - timedelta(seconds=74, milliseconds=300)
    )
    client_for(people["approver"]).post(
        f"/approvals/{approval.pk}/decide/", {"decision": "approve"}
    )
    body = client_for(people["operator"]).get(f"/runs/{run.pk}/").content.decode()
    assert 'class="seg seg-wait"' in body
    assert "waiting for approval 1m 14s" in body
