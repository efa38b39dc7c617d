"""Long-term memory about a customer: facts that outlive a run (shown on the ticket page)."""

from __future__ import annotations

from typing import Any

from agentweb.runtime.tools import ToolContext, tool
from agentweb.shop import actions
from agentweb.shop.models import CustomerFact

from ._context import idempotency_key


@tool(risk="low", read_only=True)
def recall_customer_facts(customer_id: str) -> dict[str, Any]:
    """Recall what earlier runs remembered about a customer (preferences, past escalations).

    Args:
        customer_id: The customer id, e.g. "C001".
    """
    customer = actions.find_customer(customer_id)
    facts = CustomerFact.objects.filter(customer=customer)
    return {
        "customer_id": customer.code,
        "facts": [
            {"key": f.key, "value": f.value, "updated_at": f.updated_at.isoformat()} for f in facts
        ],
    }


@tool(risk="medium")
def remember_customer_fact(
    customer_id: str, key: str, value: str, *, ctx: ToolContext | None = None
) -> dict[str, Any]:
    """Remember a fact about a customer for future tickets; replaces the value of the same key.

    Args:
        customer_id: The customer id, e.g. "C001".
        key: A short name, e.g. "preferred_contact" or "last_escalation".
        value: The fact, e.g. "phone, mornings only".
    """
    return actions.remember_customer_fact(
        customer_id, key, value, run_id=ctx.run_id if ctx else None, key=idempotency_key(ctx)
    )
