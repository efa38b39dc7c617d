"""The seam for context engineering: what the model sees at each call.

The loop asks its ``ContextPolicy`` for the messages and tools of every model call. The
default sends everything; a compaction or tool-selection policy overrides ``prepare``
(and may return ``context_compacted`` events) without touching the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from .events import Event
from .gateway import ToolSpec
from .messages import Message
from .tools import ToolRegistry

if TYPE_CHECKING:
    from .loop import LoopState

__all__ = ["ContextPolicy", "PreparedContext"]


class PreparedContext(NamedTuple):
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    events: list[Event]


class ContextPolicy:
    """Default policy: all messages of the state and every tool the agent may use."""

    def prepare(self, state: LoopState, registry: ToolRegistry) -> PreparedContext:
        return PreparedContext(state.messages, registry.specs(), [])
