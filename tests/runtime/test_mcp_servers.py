"""MCP servers' tools in the runtime, against real servers: the reference server from npm
over stdio and Streamable HTTP, mcp-server-time from PyPI, and our own faulty server."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentweb.runtime import Agent, AgentConfig, ToolContext, ToolError, ToolRegistry, mcpclient
from agentweb.runtime.events import TOOL_CALL_FINISHED, TOOL_CALL_STARTED
from agentweb.runtime.images import ToolOutput
from agentweb.runtime.mcpclient import McpFault
from agentweb.runtime.mcpserver import ServerConfig, ServerStatus, listener, set_listener
from agentweb.runtime.mcptools import make_tools, risk_of, tool_name
from agentweb.runtime.testing import ScriptedModel, call
from tests.fakes import mcp_servers


@pytest.fixture(autouse=True)
def _fresh_connections() -> Iterator[None]:
    """No listener but a test's own (the application's records into a database these
    tests do not have), and no connection left open; the listener is put back after."""
    before = listener()
    set_listener(None)
    yield
    mcpclient.close_all()
    set_listener(before)


def _tools(config: ServerConfig) -> dict[str, Any]:
    tools, problems = make_tools(config, mcpclient.connection(config).list_tools())
    assert problems == []
    return {t.name: t for t in tools}


def _ctx(call_id: str, run_id: str = "41") -> ToolContext:
    return ToolContext(call_id=call_id, run_id=run_id)


def test_risk_comes_from_the_annotations():
    assert risk_of({"readOnlyHint": True, "destructiveHint": True}) == "low"
    assert risk_of({"readOnlyHint": False, "destructiveHint": False}) == "medium"
    assert risk_of({"destructiveHint": True}) == "high"
    assert risk_of({}) == "high"  # no annotations: the MCP defaults (destructive)
    assert tool_name("crm", "get-sum") == "crm__get-sum"
    assert tool_name("crm", "admin.users/list") == "crm__admin_users_list"


def test_the_reference_server_over_stdio_lists_calls_and_maps_results():
    tools = _tools(mcp_servers.everything_stdio())
    assert tools["everything__echo"].risk == "low"  # readOnlyHint
    assert tools["everything__gzip-file-as-resource"].risk == "medium"  # destructiveHint false
    # The input schema goes to the model as the server states it.
    spec = tools["everything__get-sum"].spec()
    assert spec.parameters["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert spec.parameters["properties"]["a"] == {"type": "number", "description": "First number"}
    got = tools["everything__get-sum"](arguments={"a": 2, "b": 40}, ctx=_ctx("call_sum"))
    assert got == "The sum of 2 and 40 is 42."
    structured = tools["everything__get-structured-content"](
        arguments={"location": "Chicago"}, ctx=_ctx("call_weather")
    )
    assert isinstance(structured, dict) and set(structured) == {
        "temperature",
        "conditions",
        "humidity",
    }
    image = tools["everything__get-tiny-image"](arguments={}, ctx=_ctx("call_img"))
    assert isinstance(image, ToolOutput)
    assert [i.media_type for i in image.images] == ["image/png"]
    assert image.images[0].data.startswith(b"\x89PNG")
    assert "image" in image.result.lower()  # the text around it


def test_the_reference_server_over_streamable_http():
    with mcp_servers.http_server("everything") as url:
        tools = _tools(ServerConfig("remote", url=url, headers={"X-Api-Key": "k"}, timeout=10))
        assert tools["remote__get-sum"](arguments={"a": 1, "b": 2}, ctx=_ctx("h1")) == (
            "The sum of 1 and 2 is 3."
        )


def test_a_python_server_from_pypi_on_the_2026_protocol():
    config = mcp_servers.time_stdio(timeout=20)
    conn = mcpclient.connection(config)
    tools = _tools(config)
    assert conn._session is not None and conn._session.client().protocol_version >= "2026"
    got = tools["clock__get_current_time"](arguments={"timezone": "UTC"}, ctx=_ctx("t1"))
    assert got["timezone"] == "UTC" and got["datetime"].endswith("+00:00")


def test_arguments_are_checked_against_the_schema_before_any_call(tmp_path):
    ledger = tmp_path / "ledger"
    tools = _tools(mcp_servers.faulty_stdio(env={"FAULTY_LEDGER": str(ledger)}))
    transfer = tools["faulty__transfer"]
    from agentweb.runtime import ToolArgumentError

    with pytest.raises(ToolArgumentError, match="'amount'"):
        transfer.validate({"account": "X", "amount": "lots"})
    assert not ledger.exists()


def test_the_run_scoped_call_id_is_the_request_id_and_the_idempotency_key(tmp_path):
    ledger = tmp_path / "ledger"
    tools = _tools(mcp_servers.faulty_stdio(env={"FAULTY_LEDGER": str(ledger)}))
    assert tools["faulty__transfer"].risk == "high"  # no annotations
    assert tools["faulty__add_note"].risk == "medium"
    got = tools["faulty__transfer"](
        arguments={"account": "ACME", "amount": 12.5}, ctx=_ctx("call_T1", "77")
    )
    assert got == {"result": "moved 12.50 to ACME"}  # the server's structuredContent
    (entry,) = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert entry["request_id"] == "77:call_T1"
    assert entry["idempotency_key"] == "77:call_T1"
    assert entry["run_id"] == "77"
    assert entry["arguments"] == {"account": "ACME", "amount": 12.5}


def test_the_same_call_id_twice_at_once_still_gets_two_answers():
    config = mcp_servers.faulty_stdio()
    conn = mcpclient.connection(config)
    conn.list_tools()
    answers: list[Any] = []

    def slow() -> None:
        answers.append(conn.call("slow", {"seconds": 0.5}, call_id="same").texts)

    threads = [threading.Thread(target=slow) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == [["slept 0.5"], ["slept 0.5"]]


def test_is_error_is_a_failed_call_with_the_servers_words():
    tools = _tools(mcp_servers.faulty_stdio())
    with pytest.raises(ToolError) as exc:
        tools["faulty__fail"](arguments={"message": "account frozen"}, ctx=_ctx("f1"))
    assert str(exc.value) == "Error executing tool fail: account frozen"


def test_images_and_structured_content_of_our_server():
    tools = _tools(mcp_servers.faulty_stdio())
    picture = tools["faulty__picture"](arguments={}, ctx=_ctx("p1"))
    assert isinstance(picture, ToolOutput) and picture.result == "a red picture"
    assert picture.images[0].data.startswith(b"\x89PNG")
    weather = tools["faulty__weather"](arguments={"city": "Oslo"}, ctx=_ctx("w1"))
    assert weather == {"city": "Oslo", "temperature": 21.5, "conditions": ["sunny", "dry"]}


def test_a_run_stores_the_image_and_the_model_sees_structured_json():
    tools = _tools(mcp_servers.faulty_stdio())
    model = ScriptedModel(
        [call("faulty__picture"), call("faulty__weather", city="Oslo"), "It is sunny in Oslo."]
    )
    registry = ToolRegistry([tools["faulty__picture"], tools["faulty__weather"]])
    agent = Agent(model, registry, AgentConfig(system_prompt=""))
    state = agent.start("weather?")
    events = list(agent.run(state))
    finished = [e.data for e in events if e.type == TOOL_CALL_FINISHED]
    assert finished[0]["ok"] and finished[0]["images"][0]["media_type"] == "image/png"
    assert "data" not in json.dumps(finished[0]["images"])  # a reference, not the bytes
    assert finished[1]["result"]["temperature"] == 21.5
    started = [e.data for e in events if e.type == TOOL_CALL_STARTED]
    assert [s["risk"] for s in started] == ["low", "low"]
    model.assert_complete()


def _fault(conn: mcpclient.McpConnection, tool: str, call_id: str) -> str:
    with pytest.raises(McpFault) as exc:
        conn.call(tool, {}, call_id=call_id)
    return str(exc.value)


def test_crash_garbage_and_hang_fail_the_call_with_words_and_the_next_call_works():
    conn = mcpclient.connection(mcp_servers.faulty_stdio(timeout=2))
    assert conn.call("echo", {"text": "up"}, call_id="e0").texts == ["up"]
    crash = _fault(conn, "crash", "c1")
    assert crash.startswith("MCP server 'faulty' closed the connection during the call")
    assert "started again for the next call" in crash
    assert conn.call("echo", {"text": "again"}, call_id="e1").texts == ["again"]
    garbage = _fault(conn, "garbage", "g1")
    assert "MCP server 'faulty' answered something that is not JSON-RPC" in garbage
    assert "'this is not json {{{'" in garbage
    assert conn.call("echo", {"text": "again"}, call_id="e2").texts == ["again"]
    hang = _fault(conn, "hang", "h1")
    assert hang.startswith("MCP server 'faulty' did not answer within 2 s")
    assert conn.call("echo", {"text": "again"}, call_id="e3").texts == ["again"]
    assert conn.sessions_opened == 4  # one process per fault, each started again


def test_a_server_that_died_while_idle_is_started_again_for_the_next_call(tmp_path):
    ledger = tmp_path / "ledger"
    conn = mcpclient.connection(mcp_servers.faulty_stdio(env={"FAULTY_LEDGER": str(ledger)}))
    conn.list_tools()
    children = mcpclient.live_processes()
    assert len(children) == 1
    os.kill(children[0], 9)
    deadline = time.monotonic() + 10
    while conn._session is not None and conn._session.usable:
        assert time.monotonic() < deadline, "the session never noticed"
        time.sleep(0.05)
    got = conn.call("transfer", {"account": "A", "amount": 1}, call_id="after-kill")
    assert got.texts == ["moved 1.00 to A"]  # the call never left: sent on a new session
    assert len(ledger.read_text().splitlines()) == 1


def test_faults_over_streamable_http():
    with mcp_servers.http_server("faulty") as url:
        conn = mcpclient.connection(ServerConfig("web", url=url, timeout=2, connect_timeout=20))
        assert conn.call("echo", {"text": "up"}, call_id="e0").texts == ["up"]
        hang = _fault(conn, "hang", "h1")
        assert hang == ("MCP server 'web' did not answer within 2 s; the next call connects again")
        assert conn.call("echo", {"text": "again"}, call_id="e1").texts == ["again"]
        crash = _fault(conn, "crash", "c1")
    assert crash.startswith("MCP server 'web' closed the connection during the call")
    down = _fault(conn, "echo", "d1")
    assert down.startswith(f"MCP server 'web' is unavailable: cannot connect to {url}")


def test_headers_go_with_every_http_request():
    with mcp_servers.http_server("faulty") as url:
        config = ServerConfig("web", url=url, headers={"Authorization": "Bearer s3cret"})
        got = mcpclient.connection(config).call("headers", {}, call_id="hd")
    assert got.structured["authorization"] == "Bearer s3cret"
    assert "s3cret" not in repr(config)  # secrets stay out of logs


def test_a_server_that_cannot_start_or_be_reached_fails_with_the_reason():
    missing = ServerConfig.stdio("gone", "/nonexistent/mcp-server --flag")
    with pytest.raises(McpFault, match=r"'gone' is unavailable: cannot start '/nonexistent/mcp"):
        mcpclient.connection(missing).list_tools()
    refused = ServerConfig("away", url=f"http://127.0.0.1:{mcp_servers.free_port()}/mcp")
    with pytest.raises(McpFault, match=r"'away' is unavailable: cannot connect to http://"):
        mcpclient.connection(refused).call("x", {}, call_id="r1")
    quits = ServerConfig.stdio("quits", "python3 -c 'import sys; sys.exit(3)'")
    with pytest.raises(McpFault, match=r"'quits' is unavailable: closed the connection"):
        mcpclient.connection(quits).list_tools()


def test_many_faulty_calls_leave_no_zombies_and_no_growing_threads():
    conn = mcpclient.connection(mcp_servers.faulty_stdio(timeout=1))

    def one_round(n: int) -> None:
        for tool in ("crash", "garbage", "hang"):
            _fault(conn, tool, f"{tool}-{n}")
        assert conn.call("echo", {"text": "ok"}, call_id=f"ok-{n}").texts == ["ok"]

    one_round(0)
    threads_before = threading.active_count()
    for n in range(1, 5):
        one_round(n)
    children = mcpclient.live_processes()
    assert len(children) == 1  # the one live server, nothing left behind
    assert mcp_servers.zombies(children) == []
    assert threading.active_count() <= threads_before
    assert conn.sessions_opened == 1 + 3 * 5
    mcpclient.close_all()
    assert mcpclient.live_processes() == []


def test_a_stdio_server_gets_only_its_own_environment(monkeypatch: pytest.MonkeyPatch):
    for secret in ("SECRET_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DATABASE_URL"):
        monkeypatch.setenv(secret, "do-not-leak")
    config = mcp_servers.faulty_stdio(env={"CRM_TOKEN": "for-the-server"})
    env = json.loads(mcpclient.connection(config).call("environment", {}, call_id="env").texts[0])
    allowed = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "CRM_TOKEN"}
    # Python itself may add LC_CTYPE when it coerces the C locale.
    assert set(env) - {"LC_CTYPE"} <= allowed
    assert env["CRM_TOKEN"] == "for-the-server"
    assert "do-not-leak" not in json.dumps(env)
    # The reference server agrees.
    everything = mcp_servers.everything_stdio(env={"CRM_TOKEN": "x"})
    text = mcpclient.connection(everything).call("get-env", {}, call_id="env2").texts[0]
    assert set(json.loads(text)) <= allowed


def test_a_stdio_servers_stderr_goes_to_the_log_with_its_name(caplog: pytest.LogCaptureFixture):
    caplog.set_level("INFO", logger="agentweb.runtime.mcpclient")
    mcpclient.connection(mcp_servers.faulty_stdio(name="noisy")).list_tools()
    deadline = time.monotonic() + 5
    while "faulty: starting" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [r for r in caplog.records if "faulty: starting" in r.getMessage()]
    assert lines and lines[0].getMessage().startswith("MCP server noisy (stderr): faulty: starting")
    assert getattr(lines[0], "mcp_server", None) == "noisy"


def test_tool_lists_are_read_again_when_the_server_says_they_changed():
    heard: list[ServerStatus] = []
    got = threading.Event()

    def hear(config: ServerConfig, status: ServerStatus) -> None:
        heard.append(status)
        if status.tools and "grown" in {t.name for t in status.tools}:
            got.set()

    set_listener(hear)
    conn = mcpclient.connection(mcp_servers.faulty_stdio())  # 2026: a listen stream
    assert "grown" not in {t.name for t in conn.list_tools()}
    conn.call("grow", {}, call_id="grow1")
    assert got.wait(10), heard
    assert heard[0].state == "ready" and heard[0].tools is not None
    # The reference server (2025: the notification) says so once it has registered the
    # tools that depend on the client's capabilities.
    everything = mcpclient.connection(mcp_servers.everything_stdio())
    everything.list_tools()
    deadline = time.monotonic() + 10
    while everything.lists_changed == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert everything.lists_changed >= 1


def test_garbage_over_http_fails_the_call_with_words_and_the_next_call_connects_again():
    server = mcp_servers.GarbageHttpServer()
    try:
        conn = mcpclient.connection(ServerConfig("proxy", url=server.url, timeout=5))
        assert [t.name for t in conn.list_tools()] == ["echo"]
        first = _fault(conn, "echo", "g1")
        assert first.startswith(
            "MCP server 'proxy' answered something that is not JSON-RPC: "
            "b'<html>502 Bad Gateway</html>' (Invalid JSON: expected value at line 1 column 1)"
        )
        assert first.endswith("the next call connects again")
        _fault(conn, "echo", "g2")
        assert server.calls == 2 and conn.sessions_opened == 2
    finally:
        server.close()
