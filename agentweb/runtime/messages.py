"""Typed conversation messages shared by the loop, the model adapters and the Django side.

Every message is a small pydantic model with a ``role`` discriminator; ``Message`` is the
annotated union. ``messages_to_json`` / ``messages_from_json`` round-trip exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "AssistantMessage",
    "Attachment",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "Usage",
    "UserMessage",
    "messages_from_json",
    "messages_to_json",
]


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Attachment(_Base):
    """An image sent to a multimodal model. ``data`` is base64; an image a tool returned
    is kept by reference instead (``ref`` in the run's image store, ``data`` empty) and
    its bytes are filled in only for the model call."""

    kind: Literal["image"] = "image"
    media_type: str
    data: str = ""
    ref: str | None = None
    width: int | None = None
    height: int | None = None


class ToolCall(_Base):
    """A call the model asked for. ``id`` is the provider's id, echoed back verbatim.

    ``raw_arguments`` keeps the provider's argument text when it was not clean JSON
    (repaired or unparseable); it is ``None`` when ``arguments`` is the whole story.
    """

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None


class SystemMessage(_Base):
    role: Literal["system"] = "system"
    content: str


class UserMessage(_Base):
    role: Literal["user"] = "user"
    content: str
    attachments: list[Attachment] = Field(default_factory=list)


class AssistantMessage(_Base):
    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasoning: str | None = None


class ToolMessage(_Base):
    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    attachments: list[Attachment] = Field(default_factory=list)  # images the tool returned


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]

_MESSAGES = TypeAdapter(list[Message])


class Usage(_Base):
    """Token usage of one model call or a sum of them."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def messages_to_json(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Plain JSON-ready dicts for ``messages`` (the inverse of ``messages_from_json``)."""
    return [m.model_dump(mode="json") for m in messages]


def messages_from_json(data: Iterable[dict[str, Any]]) -> list[Message]:
    """Typed messages from the dicts made by ``messages_to_json``."""
    return _MESSAGES.validate_python(list(data))
