"""The run tree on the run page and over its WebSocket; approvals of children in the inbox."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async as sync_to_async
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client

from agentweb.runs import delegation, export, lifecycle
from agentweb.runs.models import AgentProfile, Run
from tests.web import factories as f
from tests.web.test_consumers import _cookie, communicator, receive_until_state

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _short_lived_connections() -> None:
    # Consumers read from pool threads; close each thread's connection after its read.
    connections.settings["default"]["CONN_MAX_AGE"] = 0


@pytest.fixture
def tree() -> dict[str, Any]:
    from agentweb.accounts.roles import ensure_roles

    groups = ensure_roles()
    people = {}
    for name in ("operator", "approver"):
        user = User.objects.create_user(name, password="pw-123456789")
        user.groups.add(groups[name])
        people[name] = user
    AgentProfile.objects.create(name="billing", system_prompt="b")
    AgentProfile.objects.create(name="shipping", system_prompt="s")
    top = f.make_run(people["operator"], task="Late parcel and a double charge")
    AgentProfile.objects.filter(pk=top.agent_id).update(delegates=["billing", "shipping"])
    Run.objects.filter(pk=top.pk).update(status=Run.Status.WAITING_SUBTASKS)
    billing = delegation.create_child(top.pk, "billing", "Was it <b>charged</b> twice?", "c1")
    shipping = delegation.create_child(top.pk, "shipping", "Where is 1Z1?", "c2")
    AgentProfile.objects.filter(name="shipping").update(delegates=["billing"])
    carrier = delegation.create_child(shipping.pk, "billing", "Ask the carrier", "c3")
    f.emit(billing, f.model_called(tool="get_order"), status="running")
    f.emit(shipping, f.model_called(text="In transit <i>now</i>", tool=""), status="succeeded")
    return {**people, "top": top, "billing": billing, "shipping": shipping, "carrier": carrier}


def _page(user: User, run: Run) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def test_it_shows_the_tree_with_status_link_and_latest_step(tree) -> None:
    html = _page(tree["operator"], tree["top"])
    for key in ("billing", "shipping", "carrier"):
        assert f'id="tree-run-{tree[key].pk}"' in html
        assert f'href="/runs/{tree[key].pk}/"' in html
    assert "model asked for get_order" in html  # billing's latest step
    assert "model: In transit &lt;i&gt;now&lt;/i&gt;" in html  # model text escaped
    assert "Was it &lt;b&gt;charged&lt;/b&gt; twice?" in html
    assert "<b>charged</b>" not in html
    assert html.index(f"tree-run-{tree['shipping'].pk}") < html.index(
        f"tree-run-{tree['carrier'].pk}"
    )  # a grandchild right under its parent
    child = _page(tree["operator"], tree["carrier"])
    assert f'Subtask of run <a href="/runs/{tree["shipping"].pk}/">' in child
    assert f'top run <a href="/runs/{tree["top"].pk}/">' in child


def test_the_parent_and_children_json(tree) -> None:
    client = Client()
    client.force_login(tree["operator"])
    top = client.get(f"/api/runs/{tree['top'].pk}").json()
    assert top["parent_id"] is None
    assert top["children"] == [tree["billing"].pk, tree["shipping"].pk]
    listed = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert listed[tree["shipping"].pk]["children"] == [tree["carrier"].pk]
    assert listed[tree["carrier"].pk]["parent_id"] == tree["shipping"].pk


async def test_a_childs_new_step_reaches_the_parents_page_live(tree) -> None:
    top, carrier = tree["top"], tree["carrier"]
    cookie = await sync_to_async(_cookie)(tree["operator"])
    comm = communicator(f"/ws/runs/{top.pk}/", cookie)
    assert (await comm.connect())[0]
    await receive_until_state(comm)
    # A grandchild stores a step: the top run's page gets the tree again.
    await sync_to_async(f.emit)(carrier, f.tool_started(), status="running")
    message = await comm.receive_json_from(timeout=5)
    while message["kind"] != "tree":
        message = await comm.receive_json_from(timeout=5)
    assert message["html"].startswith('<section class="card run-tree" id="run-tree"')
    assert "running get_order" in message["html"]
    await comm.disconnect()


def test_a_childs_approval_is_in_the_inbox_labelled_with_the_top_run(tree) -> None:
    billing = tree["billing"]
    f.request_approval(billing)
    client = Client()
    client.force_login(tree["approver"])
    html = client.get("/approvals/").content.decode()
    assert f'subtask of run <a href="/runs/{tree["top"].pk}/">#{tree["top"].pk}</a>' in html
    body = client.get("/api/approvals?status=pending").json()["approvals"]
    assert [(a["run"], a["top_run"]) for a in body] == [(billing.pk, tree["top"].pk)]


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_export_includes_the_children_and_import_shows_them(tree) -> None:
    import io
    import json

    client = _client(tree["operator"])
    doc = json.loads(client.get(f"/runs/{tree['top'].pk}/export.json").content)
    assert [c["run"]["id"] for c in doc["children"]] == [tree["billing"].pk, tree["shipping"].pk]
    shipping = doc["children"][1]
    assert [c["run"]["id"] for c in shipping["children"]] == [tree["carrier"].pk]
    assert [e["type"] for e in shipping["events"]] == ["model_called"]
    assert shipping["run"]["parent_id"] == tree["top"].pk
    upload = io.BytesIO(json.dumps(doc).encode())
    upload.name = "tree.json"
    html = client.post("/runs/import/", {"file": upload}).content.decode()
    assert "Subtasks in this file" in html
    assert html.count('class="tree-node level-') == 3
    assert "Was it &lt;b&gt;charged&lt;/b&gt; twice?" in html
    # A tree over the event limit is refused like a flat file.

    doc["children"][0]["events"] = [
        {"seq": i, "type": "x"} for i in range(1, export.MAX_IMPORT_EVENTS + 1)
    ]
    upload = io.BytesIO(json.dumps(doc).encode())
    upload.name = "big.json"
    refused = client.post("/runs/import/", {"file": upload}).content.decode()
    assert "events with its subtasks" in refused


def test_replay_links_the_children_to_their_replays(tree) -> None:
    html = _client(tree["operator"]).get(f"/runs/{tree['top'].pk}/replay/").content.decode()
    assert f'href="/runs/{tree["billing"].pk}/replay/"' in html
    assert f'href="/runs/{tree["carrier"].pk}/replay/"' in html


def test_compare_pairs_the_children_by_agent(tree) -> None:
    other = f.make_run(tree["operator"], task="Late parcel and a double charge, again")
    billing2 = delegation.create_child(other.pk, "billing", "Was it charged twice?", "c1")
    Run.objects.filter(pk=billing2.pk).update(status="succeeded", final_answer="Once only.")
    client = _client(tree["operator"])
    html = client.get(f"/runs/compare/?a={tree['top'].pk}&b={other.pk}").content.decode()
    assert "Subtasks, by agent" in html
    assert f"?a={tree['billing'].pk}&amp;b={billing2.pk}" in html  # drill into the pair
    assert "no shipping subtask" in html  # the right run gave shipping nothing


def test_the_parent_shows_rolled_up_usage_and_the_list_marks_subtasks(tree) -> None:
    from django.db import transaction

    with transaction.atomic():
        billing = Run.objects.select_for_update().get(pk=tree["billing"].pk)
        Run.objects.filter(pk=billing.pk).update(
            status="succeeded", usage={"model_calls": 2, "input_tokens": 700, "output_tokens": 9}
        )
        billing.refresh_from_db()
        lifecycle.ended(billing)
    top = Run.objects.get(pk=tree["top"].pk)
    assert top.usage["model_calls"] == 2 and top.usage["children"]["input_tokens"] == 700
    client = _client(tree["operator"])
    page = client.get(f"/runs/{top.pk}/").content.decode()
    assert "700 in / 9 out" in page and "incl. subtasks" in page
    listing = client.get("/runs/").content.decode()
    assert f'subtask of <a href="/runs/{top.pk}/">#{top.pk}</a>' in listing
