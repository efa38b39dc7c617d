"""`manage.py run_task` starts a run through the same path as the page and prints steps."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agentweb.runs.models import Run
from agentweb.runtime.testing import call


def test_it_prints_each_step_and_exits_0(people, scripted, enqueued, capsys) -> None:
    scripted.enqueue(call("lookup", order_id="A7"), "A7 was delivered.")
    call_command("run_task", "Where is order A7?", "--inline")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[  1] run_started")
    assert any("lookup" in line and "A7" in line for line in out)
    assert out[-1] == "[  6] finished: A7 was delivered."
    assert Run.objects.get().status == "succeeded"


def test_it_exits_3_when_waiting_for_approval(people, scripted, enqueued, capsys) -> None:
    scripted.enqueue(call("pay_out", order_id="A7", amount=50))
    with pytest.raises(SystemExit) as exited:
        call_command("run_task", "Refund A7", "--inline", "--json")
    assert exited.value.code == 3
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert lines[-1]["type"] == "approval_requested"


def test_it_refuses_an_unknown_user_or_agent(people, enqueued) -> None:
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("run_task", "x", "--user", "ghost")
    with pytest.raises(CommandError, match="unknown agent 'nope'"):
        call_command("run_task", "x", "--agent", "nope")
