"""A tool with every kind of argument the Edit & approve form knows: text, number,
whole number, choice, yes/no, list and optional text (tests of the schema's form)."""

from __future__ import annotations

from typing import Any, Literal

from agentweb.runtime.tools import Tool, ToolError, tool


def _check(arguments: dict[str, Any]) -> None:
    if arguments.get("mode") == "strict" and arguments.get("wipe"):
        raise ToolError("A strict set-up never wipes the device: pick lenient to wipe.")


@tool(risk="high", check=_check)
def configure_device(
    device: str,
    budget: float,
    mode: Literal["strict", "lenient"],
    wipe: bool,
    tags: list[str],
    retries: int = 3,
    note: str | None = None,
) -> dict[str, Any]:
    """Configure a device.

    Args:
        device: The device's name, e.g. "LAPTOP-7".
        budget: What it may cost, in EUR.
        mode: How strict the set-up is.
        wipe: Erase it first.
        tags: Labels for the inventory.
        retries: How often to try.
        note: Anything the technician should know.
    """
    return {"device": device, "mode": mode}


#: A tool whose arguments a JSON Schema describes, as an MCP server's are.
crm__close_case = Tool.from_schema(
    "crm__close_case",
    {
        "type": "object",
        "properties": {
            "case": {"type": "string", "description": "The case number"},
            "outcome": {"enum": ["solved", "duplicate"]},
            "refund": {"type": ["number", "null"], "minimum": 0},
        },
        "required": ["case", "outcome"],
        "additionalProperties": False,
    },
    lambda arguments, ctx: {"closed": arguments["case"]},
    description="Close a case in the CRM.",
)
