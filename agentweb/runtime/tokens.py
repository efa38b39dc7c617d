"""Token counts for context budgets, without the network.

The default is a documented estimate: about four characters per token for English and
JSON (what OpenAI's and Anthropic's tokenizers average on such text), plus a fixed
overhead per message for the role and framing, plus the JSON of each tool call and each
tool schema. It errs on the high side for ASCII and is within a few percent on typical
support conversations. ``tiktoken_counter`` uses tiktoken's exact encoding when the
package is installed *and* its BPE file is already on disk (it is never downloaded here);
it returns ``None`` otherwise, so callers fall back to the estimate.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from typing import Protocol

from .gateway import ToolSpec
from .messages import AssistantMessage, Message, ToolMessage, UserMessage

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD",
    "TOOL_OVERHEAD",
    "EstimateCounter",
    "TiktokenCounter",
    "TokenCounter",
    "default_counter",
    "tiktoken_counter",
]

CHARS_PER_TOKEN = 4.0
MESSAGE_OVERHEAD = 4  # role, separators: what the chat templates add per message
TOOL_OVERHEAD = 8  # per offered tool: the function wrapper around name and schema
IMAGE_TOKENS = 800  # a typical image attachment after the provider downsizes it
MAX_IMAGE_TOKENS = 1600  # providers shrink larger images to about this


def image_tokens(width: int | None, height: int | None) -> int:
    """What one image costs: about width * height / 750 tokens, as the providers count
    it, bounded by their downsizing; ``IMAGE_TOKENS`` when the size is unknown."""
    if not width or not height:
        return IMAGE_TOKENS
    return max(85, min(MAX_IMAGE_TOKENS, math.ceil(width * height / 750)))


class TokenCounter(Protocol):
    """Counts tokens of text, messages and tool specs."""

    name: str

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_messages(self, messages: Sequence[Message]) -> int: ...

    def count_tools(self, tools: Sequence[ToolSpec]) -> int: ...


#: Tool specs whose count a counter keeps (more: it forgets them all and starts again).
_KNOWN_TOOLS = 2048


class _Counter:
    """Shared message and tool framing; subclasses decide how text becomes tokens."""

    name = "base"

    def count_text(self, text: str) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        n = MESSAGE_OVERHEAD + self.count_text(message.content)
        if isinstance(message, AssistantMessage):
            for c in message.tool_calls:
                args = c.raw_arguments or json.dumps(c.arguments, ensure_ascii=False)
                n += MESSAGE_OVERHEAD + self.count_text(c.name) + self.count_text(args)
            if message.reasoning:
                n += self.count_text(message.reasoning)
        elif isinstance(message, ToolMessage):
            n += self.count_text(message.name) + 2
        if isinstance(message, ToolMessage | UserMessage):
            n += sum(image_tokens(a.width, a.height) for a in message.attachments)
        return n

    def count_messages(self, messages: Sequence[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_tools(self, tools: Sequence[ToolSpec]) -> int:
        """The tokens of the tools' names, descriptions and schemas. A tool's spec is made
        once (``Tool.spec``) and offered at every model call: its count is kept with it
        (by identity; the spec is kept too, so its id is not reused meanwhile)."""
        known: dict[int, tuple[ToolSpec, int]] = self.__dict__.setdefault("_tool_counts", {})
        total = 0
        for t in tools:
            hit = known.get(id(t))
            if hit is None or hit[0] is not t:
                if len(known) >= _KNOWN_TOOLS:
                    known.clear()
                hit = known[id(t)] = (t, self._count_tool(t))
            total += hit[1]
        return total

    def _count_tool(self, t: ToolSpec) -> int:
        return (
            TOOL_OVERHEAD
            + self.count_text(t.name)
            + self.count_text(t.description)
            + self.count_text(json.dumps(t.parameters, ensure_ascii=False))
        )


class EstimateCounter(_Counter):
    """``ceil(len(text) / chars_per_token)`` per text, plus per-message overhead."""

    name = "estimate"

    def __init__(self, chars_per_token: float = CHARS_PER_TOKEN) -> None:
        if chars_per_token <= 0:
            raise ValueError("chars_per_token must be positive")
        self.chars_per_token = chars_per_token

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0


class TiktokenCounter(_Counter):
    """Exact counts with a tiktoken encoding (see ``tiktoken_counter``)."""

    def __init__(self, encode: Callable[[str], list[int]], name: str) -> None:
        self._encode = encode
        self.name = f"tiktoken:{name}"

    def count_text(self, text: str) -> int:
        return len(self._encode(text)) if text else 0


@functools.lru_cache(maxsize=64)
def tiktoken_counter(model: str | None = None) -> TiktokenCounter | None:
    """A tiktoken counter for ``model`` when tiktoken and its encoding are available
    offline; ``None`` otherwise (not installed, unknown model, or the BPE file would
    have to be downloaded). One answer per model and process: a failed import is not
    remembered by Python, and searching for a module that is not installed again at
    every run cost each run two searches of the whole path."""
    try:
        import tiktoken  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    try:
        enc = tiktoken.encoding_for_model(model) if model else tiktoken.get_encoding("o200k_base")
    except Exception:  # unknown model, or no cached BPE file and no network
        return None

    def encode(text: str) -> list[int]:
        return list(enc.encode(text, disallowed_special=()))

    return TiktokenCounter(encode, str(getattr(enc, "name", "encoding")))


def default_counter(model: str | None = None) -> TokenCounter:
    """tiktoken for OpenAI models when it works offline, the estimate otherwise."""
    if model and model.startswith("openai:"):
        exact = tiktoken_counter(model.partition(":")[2])
        if exact is not None:
            return exact
    return _ESTIMATE


#: The estimate every run without tiktoken counts with: one per process, so the counts
#: it keeps of the tools' specs (``count_tools``) serve every run, as tiktoken's do.
_ESTIMATE = EstimateCounter()
