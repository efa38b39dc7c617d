import json

import pytest
from pydantic import ValidationError

from agentweb.runtime.messages import (
    AssistantMessage,
    Attachment,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    messages_from_json,
    messages_to_json,
)


def _conversation():
    return [
        SystemMessage(content="You help."),
        UserMessage(
            content="What is in this picture?",
            attachments=[Attachment(media_type="image/png", data="iVBORw0KGgo=")],
        ),
        AssistantMessage(
            content="Let me look.",
            tool_calls=[
                ToolCall(id="call_1", name="get_order", arguments={"order_id": "A1", "n": [1, 2]}),
                ToolCall(id="x y", name="search_kb", arguments={}, raw_arguments="{'q': 1,}"),
            ],
            reasoning="thinking…",
        ),
        ToolMessage(call_id="call_1", name="get_order", content='{"ok": true}'),
        ToolMessage(call_id="x y", name="search_kb", content="boom", is_error=True),
        AssistantMessage(content="Done ✓"),
    ]


def test_it_round_trips_exactly_through_json():
    msgs = _conversation()
    data = json.loads(json.dumps(messages_to_json(msgs)))
    back = messages_from_json(data)
    assert back == msgs
    assert [type(m) for m in back] == [type(m) for m in msgs]
    assert messages_to_json(back) == data


def test_it_uses_the_role_discriminator():
    with pytest.raises(ValidationError):
        messages_from_json([{"role": "robot", "content": "x"}])
    assert messages_from_json([{"role": "user", "content": "hi"}])[0].attachments == []


def test_it_adds_usage():
    total = Usage(input_tokens=3, output_tokens=4) + Usage(input_tokens=1, output_tokens=1)
    assert (total.input_tokens, total.output_tokens, total.total_tokens) == (4, 5, 9)
