"""Tools for the engine tests: one read, one risky write that counts its side effects."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from agentweb.runtime.tools import ToolContext, ToolError, tool

SIDE_EFFECTS: Counter[str] = Counter()
KEYS: list[str] = []
#: The notes "system": one note per idempotency key, however often a key is sent.
NOTES: dict[str, str] = {}
_lock = threading.Lock()


@tool(risk="low")
def lookup(order_id: str) -> dict[str, Any]:
    """Look up an order.

    Args:
        order_id: The order's id, like A1001.
    """
    return {"order_id": order_id, "status": "delivered", "paid": 80}


PAID = 80  # what the customer paid on any order here


def check_pay_out(arguments: dict[str, Any]) -> None:
    amount = arguments.get("amount", 0)
    if amount <= 0:
        raise ToolError(f"The amount must be more than zero, got {amount}.")
    if amount > PAID:
        raise ToolError(f"At most {PAID} was paid on order {arguments.get('order_id')}.")


@tool(risk="high", check=check_pay_out)
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


@tool(risk="medium")
def note(customer_id: str, text: str, *, ctx: ToolContext | None = None) -> dict[str, Any]:
    """Add an internal note to a customer (a reversible write, no approval by default).

    Args:
        customer_id: The customer's id, like C1.
        text: The note.
    """
    key = f"{ctx.run_id}:{ctx.call_id}" if ctx else ""
    with _lock:
        SIDE_EFFECTS[f"note:{customer_id}"] += 1
        NOTES.setdefault(key, text)
    return {"noted": True, "customer_id": customer_id}
