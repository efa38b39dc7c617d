"""What the product seeds and `manage.py agents export` prints imports again (issue 26.10),
and a profile whose tools are not loaded says so on its page and as each run starts,
instead of running silently without them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from agentweb.runs import actions, engine, toolset
from agentweb.runs.models import AgentProfile, RunEvent
from agentweb.runs.profiles import seed_profiles

pytestmark = pytest.mark.django_db(transaction=True)  # the run's tools use other threads


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A fresh install: `seed_demo` with the default AGENTWEB_TOOLS."""
    from agentweb.runs import queue

    monkeypatch.setenv("AGENTWEB_DEMO_PASSWORD", "pw-12345678")
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    sent: list[int] = []
    monkeypatch.setattr(queue, "send", lambda task, run_id, **_: sent.append(run_id))
    return sent


@pytest.fixture
def workbench_loaded(settings: Any) -> Iterator[None]:
    settings.AGENTWEB_TOOLS = ["tools.ticket", "tools.workbench"]
    toolset.registry.cache_clear()
    yield
    toolset.registry.cache_clear()


def export(tmp_path: Path, capsys: Any) -> Path:
    call_command("agents", "export")
    path = tmp_path / "agents.json"
    path.write_text(capsys.readouterr().out)
    return path


def import_file(path: Path, capsys: Any) -> str:
    call_command("agents", "import", str(path))
    return str(capsys.readouterr().out)


def test_a_fresh_install_exports_what_imports_again(
    fresh: list[int], tmp_path: Path, capsys: Any
) -> None:
    path = export(tmp_path, capsys)
    names = [p["name"] for p in json.loads(path.read_text())["agents"]]
    assert "ops-assistant" not in names  # its workbench tools are not loaded by default
    assert all(toolset.missing_tools(p) == [] for p in AgentProfile.objects.all())
    out = import_file(path, capsys)
    assert out.startswith(f"imported {len(names)} profiles: 0 created")
    AgentProfile.objects.all().delete()  # and into an installation without them
    out = import_file(path, capsys)
    assert f"{len(names)} created" in out
    assert sorted(AgentProfile.objects.values_list("name", flat=True)) == sorted(names)


def test_with_the_workbench_loaded_the_ops_assistant_is_seeded_and_round_trips(
    fresh: list[int], workbench_loaded: None, tmp_path: Path, capsys: Any
) -> None:
    seed_profiles()
    assert AgentProfile.objects.filter(name="ops-assistant").exists()
    out = import_file(export(tmp_path, capsys), capsys)
    assert out.startswith("imported 6 profiles: 0 created")


def test_a_profile_whose_tools_are_unloaded_says_so_and_still_round_trips(
    fresh: list[int], tmp_path: Path, capsys: Any, settings: Any
) -> None:
    settings.AGENTWEB_TOOLS = ["tools.ticket", "tools.workbench"]
    toolset.registry.cache_clear()
    seed_profiles()
    settings.AGENTWEB_TOOLS = ["tools.ticket"]  # the module was taken out since
    toolset.registry.cache_clear()
    ops = AgentProfile.objects.get(name="ops-assistant")
    missing = toolset.missing_tools(ops)
    assert missing == ["run_python", "list_files", "read_file", "write_file", "http_get", "browse"]
    # What export printed imports again on this installation: the names it had stay.
    assert import_file(export(tmp_path, capsys), capsys).startswith("imported 6 profiles")
    # ... but a tool name that was never there is refused, naming it.
    data = json.loads(export(tmp_path, capsys).read_text())
    ops_json = next(p for p in data["agents"] if p["name"] == "ops-assistant")
    ops_json["allowed_tools"].append("run_pyhton")
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({"agents": [ops_json]}))
    with pytest.raises(Exception, match="run_pyhton"):
        import_file(path, capsys)
    # The page says so ...
    admin = User.objects.get(username="admin")
    client = Client()
    client.force_login(admin)
    page = client.get(f"/agents/{ops.pk}/").content.decode()
    assert "Tools not loaded:" in page and "<code>run_python</code>" in page
    listing = client.get("/agents/").content.decode()
    assert "6 not loaded" in listing
    # ... and so does its run as it starts, in the event, the page and run_task's line.
    run = actions.do_create_run(
        user=User.objects.get(username="operator"),
        task="Pro-rate 49.90",
        agent_name="ops-assistant",
    )
    engine.execute_run(run.pk)
    started = RunEvent.objects.get(run=run, type="run_started").data
    assert started["missing_tools"] == missing
    assert "run_python" not in started["tools"]
    assert started["system_prompt"].startswith(
        "You are the operations assistant of our shop's support team, working for operator."
    )
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "The profile names tools this installation does not load" in page
    assert "<code>browse</code>" in page


def test_run_started_carries_the_rendered_system_prompt(fresh: list[int], capsys: Any) -> None:
    operator = User.objects.get(username="operator")
    run = actions.do_create_run(user=operator, task="Where is order A1001?")
    engine.execute_run(run.pk)
    started = RunEvent.objects.get(run=run, type="run_started").data
    assert "{{" not in started["system_prompt"]  # rendered: the variables are filled in
    assert "operator" in started["system_prompt"]  # {{user}}
    assert "missing_tools" not in started
    assert started["agent_version"] == run.agent_version == 1  # profile versions (§14)
    page = Client()
    page.force_login(operator)
    body = page.get(f"/runs/{run.pk}/").content.decode()
    assert "System prompt" in body and "as the model was given it" in body
