"""Tool module used by test_tools to exercise load_tools."""

from agentweb.runtime import tool
from agentweb.runtime.tools import Tool


@tool
def lookup(order_id: str) -> str:
    """Look up an order."""
    return order_id


@tool(risk="high", name="refund_money")
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"{order_id}:{amount}"


def not_a_tool() -> None:
    pass


ALIAS: Tool = lookup  # the same object twice is collected once
