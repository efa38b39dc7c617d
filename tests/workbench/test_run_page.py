"""The whole path: a run browses a page served by the test; the next model request carries
the screenshot; the image is stored once; the run page shows it and serves it to those
who may see the run; workspace files are listed and downloadable."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentweb.runs import actions, agents, engine, toolset
from agentweb.runs.models import Run, RunEvent, RunImage
from agentweb.runs.profiles import seed_profiles
from agentweb.runtime.images import image_size
from agentweb.runtime.openai import OpenAIChatModel
from tests.fakes.llm_server import FakeLLMServer, oa_call, oa_reply
from tests.runtime.conftest import fast_provider

from .conftest import Site

PAGE = """<!doctype html><html><head><title>Carrier tracking</title>
<style>body{margin:0;font:28px sans-serif;background:#fff}#box{width:400px;height:200px;
background:rgb(220,30,30);color:#fff;padding:20px}</style></head>
<body><div id="box">Parcel 1Z999 delivered</div><p id="js">no script</p>
<script>document.getElementById('js').textContent = 'rendered by script';</script></body></html>
"""


@pytest.fixture
def workbench(settings: Any, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch):
    settings.AGENTWEB_TOOLS = ["tools.ticket", "tools.workbench"]
    settings.AGENTWEB_STREAM = False
    agents.registry.cache_clear()
    seed_profiles()  # ops-assistant: seeded where tools.workbench is loaded
    provider = fast_provider("openai", fake_llm.openai_url, read_timeout=30.0)
    model = OpenAIChatModel("fake-vision", provider)
    monkeypatch.setattr(agents, "model_for", lambda spec: model)
    monkeypatch.setenv("AGENTWEB_HTTP_ALLOW", "127.0.0.1")
    yield model
    provider.close()
    agents.registry.cache_clear()


def _outsider() -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(f"outsider{Run.objects.count()}", password="x")


def _run(user: Any, task: str) -> Run:
    return actions.do_create_run(user=user, task=task, agent_name="ops-assistant")


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="no /usr/bin/chromium")
def test_it_browses_sends_the_screenshot_and_shows_it(
    people: dict[str, Any],
    enqueued: list[int],
    workbench: OpenAIChatModel,
    fake_llm: FakeLLMServer,
    site: Site,
    client: Any,
) -> None:
    site.write("track.html", PAGE)
    fake_llm.enqueue(
        oa_reply(tool_calls=[oa_call("call_b1", "browse", {"url": site.url("/track.html")})]),
        oa_reply("The carrier page says parcel 1Z999 was delivered."),
    )
    run = _run(people["operator"], "Has parcel 1Z999 arrived? Check the carrier page.")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED, Run.objects.get(pk=run.pk)

    # the second model request: tool result text, then a user message with the image
    second = fake_llm.requests[1].json["messages"]
    tool_msg = next(m for m in second if m["role"] == "tool")
    assert "rendered by script" in tool_msg["content"]
    assert second[-1]["role"] == "user"
    urls = [p["image_url"]["url"] for p in second[-1]["content"] if p["type"] == "image_url"]
    assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,")
    png = base64.b64decode(urls[0].split(",", 1)[1])
    assert image_size(png) == (1280, 800)
    assert _red_pixels(png) > 1000  # the page's red box is in the picture

    # stored once, referenced by URL; no event and no loop state carries the bytes
    image = RunImage.objects.get(run=run)
    assert bytes(image.data) == png and (image.width, image.height) == (1280, 800)
    finished = RunEvent.objects.get(run=run, type="tool_call_finished")
    url = f"/runs/{run.pk}/images/{image.sha256}"
    assert [i["url"] for i in finished.data["images"]] == [url]
    stored = json.dumps([e.data for e in RunEvent.objects.filter(run=run)])
    stored += json.dumps(Run.objects.get(pk=run.pk).state)
    assert urls[0].split(",", 1)[1][:64] not in stored

    # the run page shows it inside that event's element; the image is served to the owner
    client.force_login(people["operator"])
    page = client.get(f"/runs/{run.pk}/").content.decode()
    element = page.split(f'id="event-{finished.seq}"', 1)[1].split("</li>", 1)[0]
    assert f'<img src="{url}"' in element and 'width="1280" height="800"' in element
    replay = client.get(f"/runs/{run.pk}/replay/").content.decode()
    assert f'<img src="{url}"' in replay
    got = client.get(url)
    assert got.status_code == 200 and got["Content-Type"] == "image/png"
    assert got.content == png and got["X-Content-Type-Options"] == "nosniff"
    client.force_login(_outsider())  # a user without a role sees no run
    assert client.get(url).status_code == 403
    client.logout()
    assert client.get(url).status_code == 302  # to the login page


def _red_pixels(png: bytes) -> int:
    """Count strongly red pixels by decoding the PNG with the standard library."""
    import struct
    import zlib

    pos, chunks = 8, []
    width = height = 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    prev = bytearray(stride)
    red = 0
    i = 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = prev[x]
            c = prev[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        for x in range(0, stride, channels):
            r, g, bl = line[x], line[x + 1], line[x + 2]
            if r > 200 and g < 60 and bl < 60:
                red += 1
        prev = line
    return red


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="no /usr/bin/chromium")
def test_a_profile_without_vision_sends_text_only_but_keeps_the_image(
    people: dict[str, Any],
    enqueued: list[int],
    workbench: OpenAIChatModel,
    fake_llm: FakeLLMServer,
    site: Site,
) -> None:
    from agentweb.runs.models import AgentProfile

    AgentProfile.objects.filter(name="ops-assistant").update(vision=False)
    site.write("track.html", PAGE)
    fake_llm.enqueue(
        oa_reply(tool_calls=[oa_call("call_b1", "browse", {"url": site.url("/track.html")})]),
        oa_reply("Delivered."),
    )
    run = _run(people["operator"], "Check the carrier page.")
    assert engine.execute_run(run.pk) == Run.Status.SUCCEEDED
    second = json.dumps(fake_llm.requests[1].json)
    assert "image_url" not in second and "data:image" not in second
    assert "rendered by script" in second
    assert RunImage.objects.filter(run=run).count() == 1  # people still see it


def test_a_refused_browse_is_a_failed_call_and_nothing_is_fetched(
    people: dict[str, Any],
    enqueued: list[int],
    workbench: OpenAIChatModel,
    fake_llm: FakeLLMServer,
    site: Site,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTWEB_HTTP_ALLOW")
    site.write("track.html", PAGE)
    fake_llm.enqueue(
        oa_reply(tool_calls=[oa_call("call_b1", "browse", {"url": site.url("/track.html")})]),
        oa_reply("I could not open the page."),
    )
    run = _run(people["operator"], "Check the carrier page.")
    engine.execute_run(run.pk)
    finished = RunEvent.objects.get(run=run, type="tool_call_finished")
    assert finished.data["ok"] is False
    assert finished.data["error"] == "refused: 127.0.0.1 is a loopback address"
    assert site.hits == []
    assert not RunImage.objects.filter(run=run).exists()


def test_workspace_files_are_listed_and_downloadable_by_those_who_may_see_the_run(
    people: dict[str, Any],
    enqueued: list[int],
    workbench: OpenAIChatModel,
    fake_llm: FakeLLMServer,
    client: Any,
    data_dir: Path,
) -> None:
    fake_llm.enqueue(
        oa_reply(
            tool_calls=[
                oa_call(
                    "call_w1",
                    "write_file",
                    {"path": "refund/calc.html", "content": "<script>alert(1)</script>"},
                )
            ]
        ),
        oa_reply("Written."),
    )
    run = _run(people["operator"], "Write the calculation down.")
    engine.execute_run(run.pk)
    assert (data_dir / "workspaces" / str(run.pk) / "refund" / "calc.html").exists()
    client.force_login(people["operator"])
    page = client.get(f"/runs/{run.pk}/").content.decode()
    link = f"/runs/{run.pk}/files/refund/calc.html"
    assert f'href="{link}"' in page
    got = client.get(link)
    assert got.status_code == 200
    assert got["Content-Disposition"].startswith("attachment")
    assert got["Content-Type"] == "application/octet-stream"
    assert b"".join(got.streaming_content) == b"<script>alert(1)</script>"
    for bad in ("../1/x", "%2e%2e/x", "/etc/passwd"):
        assert client.get(f"/runs/{run.pk}/files/{bad}").status_code == 404
    os.symlink("/etc/hostname", data_dir / "workspaces" / str(run.pk) / "host")
    assert client.get(f"/runs/{run.pk}/files/host").status_code == 404
    client.force_login(_outsider())
    assert client.get(link).status_code == 403
    client.force_login(people["approver"])  # every role may see every run
    assert client.get(link).status_code == 200


def test_the_ops_assistant_profile_is_seeded_with_workbench_and_ticket_tools(
    people: dict[str, Any], workbench: OpenAIChatModel
) -> None:
    from agentweb.runs.models import AgentProfile

    profile = AgentProfile.objects.get(name="ops-assistant")
    allowed = toolset.allowed_tools(profile)
    assert {"run_python", "browse", "http_get", "read_file", "write_file", "list_files"} <= set(
        allowed
    )
    assert {"get_order", "track_shipment", "add_customer_note"} <= set(allowed)
    assert "issue_refund" not in allowed
    risks = {t.name: t.risk for t in agents.registry() if t.name in allowed}
    assert risks["run_python"] == risks["write_file"] == "medium"
    assert {risks[n] for n in ("list_files", "read_file", "http_get", "browse")} == {"low"}


def test_beat_cleans_old_workspaces(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    """The workbench registers its clean-up as a housekeeping hook; beat's task runs it."""
    from agentweb.runs.tasks import housekeeping
    from tools.workbench import workspace

    old = workspace.workspace_path("9001")
    recent = workspace.workspace_path("9002")
    past = 0.0
    os.utime(old, (past, past))
    monkeypatch.setenv("AGENTWEB_WORKSPACE_RETENTION_DAYS", "30")
    assert housekeeping() == 1
    assert not old.exists() and recent.exists()


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="no /usr/bin/chromium")
def test_a_person_sees_the_screenshot_on_the_run_page(
    people: dict[str, Any],
    enqueued: list[int],
    workbench: OpenAIChatModel,
    fake_llm: FakeLLMServer,
    site: Site,
    live_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from playwright.sync_api import sync_playwright

    site.write("track.html", PAGE)
    fake_llm.enqueue(
        oa_reply(tool_calls=[oa_call("call_b1", "browse", {"url": site.url("/track.html")})]),
        oa_reply("Parcel 1Z999 was delivered (see the carrier page)."),
    )
    run = _run(people["operator"], "Has parcel 1Z999 arrived? Check the carrier page.")
    engine.execute_run(run.pk)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # sync ORM next to Playwright
    shots = Path("/tmp/shots")
    shots.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("#id_username", "operator")
        page.fill("#id_password", "pw-123456789")
        page.click("button[type=submit]")
        page.wait_for_url("**/tickets/")
        page.goto(f"{live_server.url}/runs/{run.pk}/")
        img = page.locator(".ev-tool_call_finished .tool-images img")
        img.wait_for()
        # a function, not an expression: polling an expression needs eval, which the CSP refuses
        page.wait_for_function("() => document.querySelector('.tool-images img').complete")
        natural = img.evaluate("i => [i.naturalWidth, i.naturalHeight]")
        img.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "workbench-run-page.png"), full_page=True)
        browser.close()
    assert natural == [1280, 800]
