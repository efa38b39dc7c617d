"""One renderer per event type: its words (runs/event_text.py), which the run tree,
`run_task` and the replay's rebuilt conversation all use, and its fragment
(templates/web/events/<type>.html), the same on the live page, the replay and the replay of
an exported file, for every type of the contract."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.template.loader import get_template, render_to_string

from agentweb.runs import event_text
from agentweb.runs.event_text import EventText, text_of
from agentweb.runs.management.commands.run_task import describe
from agentweb.runs.models import RunEvent
from agentweb.runtime import events as ev
from agentweb.web import run_tree, timeline
from agentweb.web.timeline import template_for

EVIL = "<b>x</b>"

#: One event of each type.
SAMPLES: dict[str, ev.Event] = {
    e.type: e
    for e in [
        ev.RunStarted(task="t", model="demo", scripted=True, tools=["lookup"], max_iterations=5),
        ev.ModelCalled(
            model="demo",
            latency_ms=812.4,
            tokens={"input": 120, "output": 30},
            text=f"Let me look {EVIL}",
            tool_calls=[{"id": "c1", "name": "lookup", "arguments": {"order_id": "A7"}}],
            finish_reason="tool_calls",
            iteration=1,
        ),
        ev.ToolCallStarted(call_id="c1", tool="lookup", arguments={"order_id": "A7"}, risk="low"),
        ev.ToolCallFinished(
            call_id="c1", tool="lookup", ok=False, result=None, error=f"no {EVIL}", duration_ms=41.7
        ),
        ev.ApprovalRequested(
            call_id="c2", tool="pay_out", arguments={"amount": 50}, risk="high", reason="high_risk"
        ),
        ev.ApprovalDecided(
            call_id="c2",
            decision="rejected",
            comment=f"too much {EVIL}",
            arguments=None,
            tool="pay_out",
            by="approver",
        ),
        ev.ApprovalGiven(
            call_id="c2", tool="pay_out", by=f"ann {EVIL}", given=1, needed=2, edited=False
        ),
        ev.ContextCompacted(
            tokens_before=9000,
            tokens_after=3000,
            budget=4000,
            done={"digested": ["c1"]},
            actions=["digested"],
            window_start=4,
        ),
        ev.RunFinished(final_answer=f"Done.\n{EVIL}", decided_by="model", usage={}),
        ev.RunFailed(reason=f"broke {EVIL}"),
        ev.RunCancelled(by="operator"),
        ev.SubtaskStarted(task_id=7, agent="billing", task="Check it"),
        ev.SubtaskFinished(task_id=7, status="succeeded", result="Due back: 0.00"),
        ev.CompletionObjected(validator="claims", reason=f"unfounded {EVIL}"),
    ]
}

#: What each says today: (summary, log, said).
WORDS: dict[str, tuple[str, str, tuple[str, str] | None]] = {
    "run_started": ("run started", "run_started", None),
    "model_called": (
        "model asked for lookup",
        f"model demo 812 ms (120→30 tokens): Let me look {EVIL} → lookup",
        ("assistant", f'Let me look {EVIL}\n→ lookup({{\n  "order_id": "A7"\n}})'),
    ),
    "tool_call_started": ("running lookup", '→ lookup({"order_id": "A7"})', None),
    "tool_call_finished": (
        "lookup failed",
        f"← lookup error: no {EVIL} in 42 ms",
        ("tool · lookup", f"error: no {EVIL}"),
    ),
    "approval_requested": (
        "waiting for a person to decide pay_out",
        '⏸ approval needed for pay_out({"amount": 50})',
        None,
    ),
    "approval_decided": (
        "pay_out rejected",
        f"✔ pay_out rejected by approver: too much {EVIL}",
        ("tool", f"pay_out rejected: too much {EVIL}"),
    ),
    "context_compacted": (
        "context compacted",
        "context_compacted",
        ("system", "context compacted: 9000 → 3000 tokens"),
    ),
    "run_finished": (f"answered: Done. {EVIL}", f"finished: Done.\n{EVIL}", None),
    "run_failed": (f"failed: broke {EVIL}", f"failed: broke {EVIL}", None),
    "run_cancelled": ("cancelled", "run_cancelled", None),
    "approval_given": (
        f"pay_out approved by ann {EVIL} (1 of 2)",
        f"✔ pay_out approved by ann {EVIL} (1 of 2)",
        None,
    ),
    "subtask_started": ("delegated task #7 to billing", "subtask_started", None),
    "subtask_finished": ("task #7 succeeded", "subtask_finished", None),
    "completion_objected": (
        "completion objected",
        "completion_objected",
        ("validator · claims", f"unfounded {EVIL}"),
    ),
}


def _stored(kind: str, data: dict[str, Any], seq: int = 1) -> RunEvent:
    return RunEvent(seq=seq, type=kind, data=data, at=datetime(2026, 1, 1, tzinfo=UTC))


def test_every_event_type_of_the_contract_has_words_and_a_sample() -> None:
    assert set(event_text.TEXT) == ev.EVENT_TYPES
    assert set(SAMPLES) == ev.EVENT_TYPES == set(WORDS)
    for kind, sample in SAMPLES.items():
        assert ev.misfit(kind, sample.data) == [], kind


@pytest.mark.parametrize("kind", sorted(ev.EVENT_TYPES))
def test_it_says_what_each_type_said_before(kind: str) -> None:
    summary, log, said = WORDS[kind]
    assert text_of(kind, SAMPLES[kind].data) == EventText(summary, log, said)


@pytest.mark.parametrize("kind", sorted(ev.EVENT_TYPES))
def test_the_tree_the_command_and_the_replay_use_the_table(kind: str, monkeypatch) -> None:
    monkeypatch.setitem(
        event_text.TEXT,
        kind,
        lambda data: EventText(f"summary {kind}", f"log {kind}", ("marker", f"said {kind}")),
    )
    event = _stored(kind, SAMPLES[kind].data)
    assert run_tree.latest_step(event) == f"summary {kind}"
    assert describe(event) == f"log {kind}"
    steps = timeline.steps_for([event])
    messages = timeline.replay_context("the task", steps)
    said = [(m.role, m.text) for m in messages]
    assert said == [("user", "the task"), ("marker", f"said {kind}")]
    assert steps[0].ctx == 1


def test_an_unknown_type_is_its_name_and_odd_data_does_not_break_the_words() -> None:
    assert text_of("mystery_event", {"a": 1}) == EventText("mystery event", "mystery_event")
    odd: dict[str, Any] = {"tokens": "many", "latency_ms": "slow", "tool_calls": ["x", 3]}
    assert text_of("model_called", odd).log == "model None 0 ms (0→0 tokens)"
    assert text_of("tool_call_finished", {"duration_ms": None}).log == "← None error: None in 0 ms"
    for kind in ev.EVENT_TYPES:
        text_of(kind, {})  # an imported file's event may lack every key


# --- the fragments: one template per type, the same on every page ---------------------------


def test_every_event_type_has_its_template_and_an_unknown_one_shows_its_data() -> None:
    for kind in ev.EVENT_TYPES:
        assert get_template(template_for(kind)).origin.name.endswith(f"events/{kind}.html")
    step = timeline.steps_for([_stored("mystery_event", {"a": EVIL})])[0]
    html = render_to_string("web/_event.html", {"step": step})
    assert '<span class="kind">mystery_event</span>' in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and EVIL not in html


@pytest.mark.django_db
def test_the_live_page_the_replay_and_an_exported_file_show_every_type_alike() -> None:
    from django.contrib.auth.models import User
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client

    from agentweb.accounts.roles import ensure_roles
    from agentweb.web import fragments
    from tests.web import factories as f

    admin = User.objects.create_user("admin", password="pw-123456789")
    admin.groups.add(ensure_roles()["admin"])
    run = f.make_run(admin, task="Where is A7?")
    f.emit(run, *(s.to_json() for s in SAMPLES.values()), status="succeeded")
    client = Client()
    client.force_login(admin)
    live = client.get(f"/runs/{run.pk}/").content.decode()
    replay = client.get(f"/runs/{run.pk}/replay/").content.decode()
    exported = client.get(f"/runs/{run.pk}/export.json").content
    upload = SimpleUploadedFile("run.json", exported, content_type="application/json")
    imported = client.post("/runs/import/", {"file": upload}).content.decode()

    steps = timeline.steps_for(run.events.order_by("seq"), model=run.model)
    assert {s.type for s in steps} == ev.EVENT_TYPES
    for step in steps:
        fragment = fragments.event_html(run, step)
        body = render_to_string(template_for(step.type), {"step": step, "run": run})
        assert body.strip() and body in fragment, step.type
        for name, page in (("live", live), ("replay", replay), ("imported", imported)):
            assert fragment in page, (step.type, name)
    for page in (live, replay, imported):
        assert EVIL not in page and "&lt;b&gt;x&lt;/b&gt;" in page
