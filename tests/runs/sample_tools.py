"""Tools for the engine tests: one read, one risky write that counts its side effects."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from agentweb.runtime.tools import ToolContext, tool

SIDE_EFFECTS: Counter[str] = Counter()
KEYS: list[str] = []
_lock = threading.Lock()


@tool(risk="low")
def lookup(order_id: str) -> dict[str, Any]:
    """Look up an order.

    Args:
        order_id: The order's id, like A1001.
    """
    return {"order_id": order_id, "status": "delivered", "paid": 80}


@tool(risk="high")
def pay_out(order_id: str, amount: float, *, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Pay money back to the customer.

    Args:
        order_id: The order's id.
        amount: Amount in EUR, more than zero.
    """
    if amount <= 0:
        raise ValueError("amount must be more than zero")
    with _lock:
        SIDE_EFFECTS[order_id] += 1
        KEYS.append(ctx.call_id if ctx else "")
    return {"paid_out": amount, "order_id": order_id}
