"""A real Celery worker (threads pool, its own queue) with tools.workbench: run_python in
bubblewrap and browse in Chromium from a worker thread, screenshot to the next model call."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentweb.runtime.images import image_size
from tests.conftest import Proc, start_worker, wait_for
from tests.fakes.llm_server import FakeLLMServer, oa_call, oa_reply
from tools.workbench import sandbox

from .conftest import Site

pytestmark = [
    pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="no /usr/bin/chromium"),
    pytest.mark.skipif(sandbox.unavailable_reason() is not None, reason="no bubblewrap"),
]

QUEUE = f"workbench-{os.getpid()}"


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def live_worker(
    stack_env: dict[str, str], llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("workbench-worker")
    env = {
        **stack_env,
        "AGENTWEB_MODEL": "openai:fake-vision",
        "OPENAI_BASE_URL": llm.openai_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTWEB_STREAM": "0",
        "AGENTWEB_TOOLS": "tools.ticket,tools.workbench",
        "AGENTWEB_HTTP_ALLOW": "127.0.0.1",
        "AGENTWEB_DATA_DIR": str(tmp / "data"),
        "AGENTWEB_QUEUE": QUEUE,
    }
    proc: Proc = start_worker(env, tmp, "workbench-worker", concurrency=2)
    yield {"proc": proc, "data": tmp / "data"}
    proc.stop()


@pytest.fixture
def ops_assistant(demo: dict[str, Any], settings: Any) -> Iterator[None]:
    """The demo seeds ops-assistant only where tools.workbench is loaded, as the worker has."""
    from agentweb.runs import toolset
    from agentweb.runs.profiles import seed_profiles

    settings.AGENTWEB_TOOLS = ["tools.ticket", "tools.workbench"]
    toolset.registry.cache_clear()
    seed_profiles()
    yield
    toolset.registry.cache_clear()


def test_a_worker_computes_in_the_sandbox_and_looks_at_a_page(
    live_worker: dict[str, Any],
    llm: FakeLLMServer,
    demo: dict[str, Any],
    ops_assistant: None,
    enqueued: list[int],
    site: Site,
    settings: Any,
) -> None:
    from agentweb.runs import actions, tasks
    from agentweb.runs.models import Run, RunEvent, RunImage

    site.write(
        "track.html", "<title>Track</title><body style='background:#1a6'><h1>Out for delivery</h1>"
    )
    code = (
        "days = 30 - 12\nprint(round(49.90 * days / 30, 2))\nopen('refund.txt', 'w').write('29.94')"
    )
    llm.enqueue(
        oa_reply(
            tool_calls=[
                oa_call("call_py", "run_python", {"code": code}),
                oa_call("call_web", "browse", {"url": site.url("/track.html")}),
            ]
        ),
        oa_reply("Pro-rated refund 29.94; the parcel is out for delivery."),
    )
    settings.AGENTWEB_MODEL = "openai:fake-vision"  # the run records the model it uses
    run = actions.do_create_run(
        user=demo["operator"], task="Pro-rate 49.90 for 18 of 30 days", agent_name="ops-assistant"
    )
    tasks.run_agent.apply_async(args=[run.pk], queue=QUEUE)
    done = wait_for(
        lambda: Run.objects.filter(pk=run.pk, status=Run.Status.SUCCEEDED).first(), timeout=120
    )
    assert done is not None, live_worker["proc"].output()[-3000:]
    events = list(RunEvent.objects.filter(run=run).order_by("seq"))
    finished = {e.data["tool"]: e.data for e in events if e.type == "tool_call_finished"}
    assert set(finished) == {"run_python", "browse"}, [(e.type, e.data) for e in events]
    assert finished["run_python"]["ok"] and finished["run_python"]["result"]["stdout"] == "29.94\n"
    assert (Path(live_worker["data"]) / "workspaces" / str(run.pk) / "refund.txt").read_text() == (
        "29.94"
    )
    assert finished["browse"]["ok"], finished["browse"]
    wire = llm.requests[-1].json["messages"]
    urls = [p["image_url"]["url"] for p in wire[-1]["content"] if p["type"] == "image_url"]
    png = base64.b64decode(urls[0].split(",", 1)[1])
    assert image_size(png) == (1280, 800)
    assert bytes(RunImage.objects.get(run=run).data) == png
