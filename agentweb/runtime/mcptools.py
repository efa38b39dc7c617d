"""An MCP server's tools as runtime tools: the names and risks they get here, and
what their results become.

A tool ``lookup`` of the server ``crm`` is offered as ``crm__lookup``. Its risk comes
from the server's annotations: ``readOnlyHint`` → low, ``destructiveHint: false`` →
medium, anything else (no annotations included) → high; a profile may override it like
any tool's. The input schema goes to the model as the server states it, and arguments
are checked against it before every call (``Tool.from_schema``).

Results: text content → the result (blocks joined by blank lines); ``structuredContent``
→ the result itself (JSON, not its text); images → the run's image store (``ToolOutput``);
``isError`` → a failed call whose error is the server's own text. Anything that goes
wrong on the way (the server down, crashed, hung, answering garbage) fails the call
with words that name the server and say why (``mcpclient.McpFault``).

No SDK here: the connections are ``mcpclient``'s, imported on the first call (the SDK
takes most of a second to import; a process that only lists tools never pays it).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .images import MEDIA_TYPES, Image, ToolOutput
from .mcpserver import SEPARATOR, CallOutcome, ServerConfig, ToolInfo
from .tools import Risk, Tool, ToolContext, ToolError

__all__ = [
    "MAX_TOOL_NAME",
    "forget",
    "make_tools",
    "result_of",
    "risk_of",
    "tool_name",
]

log = logging.getLogger(__name__)

MAX_TOOL_NAME = 64  # what OpenAI's and Anthropic's APIs accept for a function name
MAX_RESULT_CHARS = 1_000_000  # a result's text beyond this is cut (it is stored with the run)


def risk_of(annotations: Mapping[str, Any]) -> Risk:
    """``readOnlyHint: true`` → low; ``destructiveHint: false`` → medium; otherwise high."""
    if annotations.get("readOnlyHint") is True:
        return "low"
    if annotations.get("destructiveHint") is False:
        return "medium"
    return "high"


def tool_name(server: str, tool: str) -> str:
    """The name a server's tool has here: ``<server>__<tool>``, with characters the model
    APIs refuse in a function name (anything but letters, digits, "_" and "-") as "_"."""
    return f"{server}{SEPARATOR}{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"


Caller = Callable[[ServerConfig, str, dict[str, Any], ToolContext | None], CallOutcome]


def make_tools(
    config: ServerConfig, infos: Sequence[ToolInfo], caller: Caller | None = None
) -> tuple[list[Tool], list[str]]:
    """The server's tools as runtime tools, and why any listed tool is left out (a name
    too long or taken twice after renaming, a schema that is no object schema).

    ``caller(config, tool, arguments, ctx)`` makes a call; by default this process's
    connection to the server (``mcpclient``)."""
    tools: list[Tool] = []
    problems: list[str] = []
    seen: set[str] = set()
    for info in infos:
        name = tool_name(config.name, info.name)
        if len(name) > MAX_TOOL_NAME:
            problems.append(f"{info.name}: {name!r} is longer than {MAX_TOOL_NAME} characters")
            continue
        if name in seen:
            problems.append(f"{info.name}: {name!r} is taken by another of its tools")
            continue
        try:
            tools.append(_tool(config, info, name, caller or _call_through_connection))
        except ValueError as exc:
            problems.append(f"{info.name}: {exc}")
            continue
        seen.add(name)
    for problem in problems:
        log.warning("MCP server %r: tool left out: %s", config.name, problem)
    return tools, problems


def _tool(config: ServerConfig, info: ToolInfo, name: str, caller: Caller) -> Tool:
    def call(arguments: dict[str, Any], ctx: ToolContext | None) -> Any:
        return result_of(config.name, caller(config, info.name, arguments, ctx))

    annotations = info.annotations
    risk = risk_of(annotations)
    description = info.description or info.title or info.name
    return Tool.from_schema(
        name,
        info.input_schema,
        call,
        description=description,
        risk=risk,
        # Connecting and the call have their own bounds; our own words come before the
        # tool runner's generic "timed out".
        timeout=config.connect_within + config.timeout + 5,
        # A crash mid-call may re-run it with the same id only when the server says
        # calling it again changes nothing more.
        idempotent=risk == "low" or annotations.get("idempotentHint") is True,
        # A look-up by the server's word: may run in the step of the reply that asked.
        read_only=annotations.get("readOnlyHint") is True,
    )


def result_of(server: str, outcome: CallOutcome) -> Any:
    """What a call's answer becomes: its JSON, its text, with images; ``isError`` raises
    ``ToolError`` with the server's own words."""
    text = "\n\n".join(t for t in outcome.texts if t)
    notes = list(outcome.notes)
    if outcome.is_error:
        raise ToolError(_cut(text) or f"MCP server {server!r} reported an error without a text")
    images: list[Image] = []
    for data, media_type in outcome.images:
        if media_type not in MEDIA_TYPES:
            notes.append(f"an image of type {media_type} was left out (not one the models take)")
            continue
        images.append(Image(data, media_type))
    result: Any
    if outcome.structured is not None:
        result = outcome.structured
    else:
        shown = [_cut(text)] if text else []
        shown += [f"[{n}]" for n in notes]
        result = "\n\n".join(shown) if shown else ("" if images else "(no content)")
    if images:
        return ToolOutput(result, images=images)
    return result


def _cut(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n…[cut: {len(text)} characters in all]"


def _call_through_connection(
    config: ServerConfig, tool: str, arguments: dict[str, Any], ctx: ToolContext | None
) -> CallOutcome:
    # Imported here: the SDK takes most of a second to import, and a process that
    # never calls a server (the web, a command) should not pay it.
    from . import mcpclient

    try:
        return mcpclient.connection(config).call(
            tool,
            arguments,
            call_id=ctx.call_id if ctx is not None else "",
            run_id=ctx.run_id if ctx is not None else None,
        )
    except mcpclient.McpFault as exc:
        raise ToolError(str(exc)) from None


def forget(server: str) -> None:
    """Close this process's connection to a server that was removed, if it has one (a
    process that never called a server has not loaded the client, and loads nothing)."""
    client = sys.modules.get(f"{__package__}.mcpclient")
    if client is not None:
        client.forget(server)
