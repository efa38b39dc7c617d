"""``AgentConfig``: the settings of one agent profile, as the loop reads them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["AgentConfig"]


class AgentConfig(BaseModel):
    system_prompt: str
    max_iterations: int = 20
    allowed_tools: list[str] | None = None
    risk_overrides: dict[str, str] = Field(default_factory=dict)
    stream: bool = False
    model_timeout: float = 60.0
    tool_timeout: float | None = None  # None: each tool's own timeout
    max_result_chars: int = 8000
    max_repeated_calls: int = 2  # identical consecutive call: reminder at 2nd, stop at 3rd
    max_no_progress: int = 3  # rounds repeating earlier calls+results before stopping
    vision: bool = True  # False: images from tools are stored and shown, never sent
    max_context_images: int = 4  # images sent per model call (the most recent ones)
    max_empty_replies: int = 3  # empty replies in a row before stopping
    max_reply_chars: int = 100_000  # a reply's text (and reasoning) beyond this is cut; 0: no cap
    model_deadline: float | None = 120.0  # seconds for a whole model call, retries included
    # Per tool: "always" | "never" | "default" | {"argument", "at_least", "sum_per"?};
    # they take precedence over the tools' own rules (see ``approvals``).
    approval_policies: dict[str, Any] = Field(default_factory=dict)
    # What ``run_started`` tells besides: the profile's version (None: the host keeps
    # none) and the tools the profile names that the host cannot offer.
    agent_version: int | None = None
    # A dry run (DESIGN §14): no medium/high-risk call, and none a rule gives to a person,
    # is executed or put to a person; each gets the result {"dry_run": true, "would_call":
    # tool, "arguments": ...}. Low-risk calls run as always.
    dry_run: bool = False
    missing_tools: list[str] = Field(default_factory=list)
    # Store in each ``model_called`` the messages and tool specs the call was sent
    # (``runtime.trace``; each message once per run).
    trace: bool = True
