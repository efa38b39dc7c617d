"""Model replies through the whole Django path: the reply cap (AGENTWEB_MAX_REPLY_CHARS)
and empty replies (issue 12 point 7)."""

from __future__ import annotations

from typing import Any

import pytest

from agentweb.runs import actions, engine, wiring
from agentweb.runs.models import Run, RunEvent
from agentweb.runtime.loop import TRUNCATED_MARK
from agentweb.runtime.testing import ScriptedModel


@pytest.fixture
def unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """No completion validator: these runs have no ticket facts to check."""
    from agentweb.shop import validators

    monkeypatch.setattr(validators, "validator_for_ticket", lambda *a, **k: None)


def events(run: Run, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in RunEvent.objects.filter(run=run, type=kind).order_by("seq")]


def test_a_huge_answer_is_stored_cut_and_the_run_succeeds(
    people, scripted: ScriptedModel, enqueued, settings, unchecked
) -> None:
    settings.AGENTWEB_MAX_REPLY_CHARS = 1_000
    scripted.enqueue("x" * 5_000_000)  # a 5 MB answer
    run = actions.do_create_run(user=people["operator"], task="Say a lot")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    run.refresh_from_db()
    assert run.final_answer == "x" * 1_000 + TRUNCATED_MARK
    assert events(run, "run_finished")[0]["truncated"] is True
    called = events(run, "model_called")[0]
    assert called["truncated"] is True and len(called["text"]) == len(run.final_answer)


def test_the_default_cap_is_100000_characters(people, sample_registry) -> None:
    run = actions.do_create_run(user=people["operator"], task="x")
    assert wiring.build_agent(run).config.max_reply_chars == 100_000


def test_empty_replies_stop_the_run_after_three(
    people, scripted: ScriptedModel, enqueued, unchecked
) -> None:
    scripted.enqueue(*[""] * 10)
    run = actions.do_create_run(user=people["operator"], task="Anything?")
    assert engine.execute_run(run.pk) == Run.Status.FAILED
    run.refresh_from_db()
    assert len(events(run, "model_called")) == 3
    assert "3 empty replies in a row" in run.failure_reason
    assert scripted.remaining == 7
