"""Images in tool results: stored once, referenced by events, sent to models with vision."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from agentweb.runtime import events as ev
from agentweb.runtime.anthropic import AnthropicModel
from agentweb.runtime.images import Image, MemoryImageStore, ToolOutput, image_size
from agentweb.runtime.loop import Agent, AgentConfig
from agentweb.runtime.messages import Attachment, ToolMessage, UserMessage
from agentweb.runtime.openai import OpenAIChatModel
from agentweb.runtime.testing import ScriptedModel, call
from agentweb.runtime.tokens import EstimateCounter, image_tokens
from agentweb.runtime.tools import ToolRegistry, tool
from tests.fakes.llm_server import FakeLLMServer, an_reply, oa_call, oa_reply

from .conftest import PNG_1x1


def _png(width: int, height: int) -> bytes:
    """A valid header is all the size check needs; the payload is not decoded here."""
    import struct
    import zlib

    raw = b"".join(b"\x00" + b"\x00\x00\x00" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


SHOT = _png(64, 40)


@tool
def snapshot(page: str) -> ToolOutput:
    """Take a picture of a page.

    Args:
        page: Which page.
    """
    return ToolOutput({"page": page, "text": "Parcel delivered"}, images=[Image(SHOT)])


def agent(model: Any, store: MemoryImageStore | None = None, vision: bool = True) -> Agent:
    return Agent(
        model,
        ToolRegistry([snapshot]),
        AgentConfig(system_prompt="sys", vision=vision),
        image_store=store,
    )


def run_once(model: Any, vision: bool = True) -> tuple[Agent, Any, list[Any]]:
    store = MemoryImageStore()
    a = agent(model, store, vision)
    state = a.start("check the page")
    events = list(a.run(state))
    return a, state, events


def test_an_image_is_stored_once_and_events_carry_only_a_reference() -> None:
    model = ScriptedModel([call("snapshot", page="tracking"), "It was delivered."])
    a, state, events = run_once(model)
    finished = next(e for e in events if e.type == ev.TOOL_CALL_FINISHED)
    assert finished.data["images"] == [
        {
            "ref": Image(SHOT).sha256,
            "url": f"memory:{Image(SHOT).sha256}",
            "media_type": "image/png",
            "size": len(SHOT),
            "width": 64,
            "height": 40,
        }
    ]
    b64 = base64.b64encode(SHOT).decode()
    blob = json.dumps([e.to_json() for e in events]) + json.dumps(state.to_json())
    assert b64[:40] not in blob  # no image bytes in events or in the stored loop state
    # the second model call got the bytes, attached to the tool result
    tool_msg = next(m for m in model.requests[1].messages if isinstance(m, ToolMessage))
    assert [base64.b64decode(x.data) for x in tool_msg.attachments] == [SHOT]
    assert a.image_store.get(Image(SHOT).sha256) == SHOT


def test_a_model_without_vision_gets_the_text_only() -> None:
    model = ScriptedModel([call("snapshot", page="tracking"), "ok"])
    _, _, events = run_once(model, vision=False)
    tool_msg = next(m for m in model.requests[1].messages if isinstance(m, ToolMessage))
    assert tool_msg.attachments == [] and "Parcel delivered" in tool_msg.content
    finished = next(e for e in events if e.type == ev.TOOL_CALL_FINISHED)
    assert finished.data["images"][0]["width"] == 64  # still stored and shown to people


def test_only_the_most_recent_images_are_sent() -> None:
    pages = [call("snapshot", page=f"p{i}") for i in range(6)]
    model = ScriptedModel([*pages, "done"])
    a = Agent(
        model,
        ToolRegistry([snapshot]),
        AgentConfig(system_prompt="s", max_context_images=2, max_no_progress=99),
    )
    list(a.run(a.start("look")))
    last = model.requests[-1].messages
    sent = [m.call_id for m in last if isinstance(m, ToolMessage) and m.attachments]
    assert len(sent) == 2
    all_calls = [m.call_id for m in last if isinstance(m, ToolMessage)]
    assert sent == all_calls[-2:]


def test_the_budget_counts_images() -> None:
    counter = EstimateCounter()
    plain = ToolMessage(call_id="c", name="browse", content="text")
    shot = Attachment(media_type="image/png", ref="r", width=1280, height=800)
    with_image = plain.model_copy(update={"attachments": [shot]})
    assert counter.count_message(with_image) - counter.count_message(plain) == image_tokens(
        1280, 800
    )
    assert image_tokens(1280, 800) == 1366
    assert image_tokens(8000, 8000) == 1600  # providers shrink big images
    user = UserMessage(content="x", attachments=[Attachment(media_type="image/png", data="AA==")])
    assert counter.count_message(user) > counter.count_message(UserMessage(content="x"))


def test_openai_gets_a_user_message_with_image_parts_after_the_tool_results(
    fake_llm: FakeLLMServer, openai_model: OpenAIChatModel
) -> None:
    fake_llm.enqueue(
        oa_reply(
            tool_calls=[
                oa_call("c1", "snapshot", {"page": "a"}),
                oa_call("c2", "snapshot", {"page": "b"}),
            ]
        ),
        oa_reply("done"),
    )
    a = agent(openai_model)
    list(a.run(a.start("look")))
    wire = fake_llm.requests[1].json["messages"]
    roles = [m["role"] for m in wire]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    assert all(isinstance(m["content"], str) for m in wire if m["role"] == "tool")
    parts = wire[-1]["content"]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert len(urls) == 2
    for url in urls:
        assert url.startswith("data:image/png;base64,")
        png = base64.b64decode(url.split(",", 1)[1])
        assert png == SHOT and image_size(png) == (64, 40)
    texts = [p["text"] for p in parts if p["type"] == "text"]
    assert texts == ["The snapshot call c1 returned image:", "The snapshot call c2 returned image:"]


def test_anthropic_gets_image_blocks_inside_the_tool_result(
    fake_llm: FakeLLMServer, anthropic_model: AnthropicModel
) -> None:
    fake_llm.enqueue(an_reply(tool_uses=[("tu1", "snapshot", {"page": "a"})]), an_reply("done"))
    a = agent(anthropic_model)
    list(a.run(a.start("look")))
    wire = fake_llm.requests[1].json["messages"]
    result = wire[-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "tu1"
    text, image = result["content"]
    assert text["type"] == "text" and "Parcel delivered" in text["text"]
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == SHOT


@pytest.mark.parametrize("vision", [False])
def test_no_vision_sends_no_image_on_the_wire(
    fake_llm: FakeLLMServer, openai_model: OpenAIChatModel, vision: bool
) -> None:
    fake_llm.enqueue(
        oa_reply(tool_calls=[oa_call("c1", "snapshot", {"page": "a"})]), oa_reply("ok")
    )
    a = agent(openai_model, vision=vision)
    list(a.run(a.start("look")))
    body = json.dumps(fake_llm.requests[1].json)
    assert "image_url" not in body and "base64" not in body
    assert [m["role"] for m in fake_llm.requests[1].json["messages"]][-1] == "tool"


def test_image_size_reads_png_gif_and_jpeg_headers() -> None:
    assert image_size(PNG_1x1) == (1, 1)
    assert image_size(b"GIF89a\x10\x00\x20\x00") == (16, 32)
    jpeg = b"\xff\xd8\xff\xc0\x00\x11\x08\x00\x30\x00\x40" + b"\x00" * 12
    assert image_size(jpeg) == (64, 48)
    assert image_size(b"not an image") is None


def test_a_server_without_native_tools_gets_the_images_after_the_tool_responses() -> None:
    from agentweb.runtime.gateway import ToolSpec
    from agentweb.runtime.messages import AssistantMessage, SystemMessage, ToolCall
    from agentweb.runtime.openai import _text_tool_messages

    data = base64.b64encode(SHOT).decode()
    messages = [
        SystemMessage(content="sys"),
        UserMessage(content="look"),
        AssistantMessage(tool_calls=[ToolCall(id="c1", name="snapshot", arguments={})]),
        ToolMessage(
            call_id="c1",
            name="snapshot",
            content="Parcel delivered",
            attachments=[Attachment(media_type="image/png", data=data, ref="r")],
        ),
    ]
    wire = _text_tool_messages(messages, [ToolSpec("snapshot", "d", {"type": "object"})])
    last = wire[-1]
    assert last["role"] == "user" and isinstance(last["content"], list)
    assert last["content"][0]["type"] == "text" and "<tool_response" in last["content"][0]["text"]
    urls = [p["image_url"]["url"] for p in last["content"] if p["type"] == "image_url"]
    assert urls == [f"data:image/png;base64,{data}"]
    assert all("_images" not in m and "_results" not in m for m in wire)
