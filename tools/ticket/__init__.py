"""The bundled ticket tools: they act on the demo shop (``agentweb.shop``).

Names, argument names and risk levels are part of the contract:

- read, low risk: ``get_order``, ``track_shipment``, ``get_customer``,
  ``get_customer_notes``, ``check_inventory``, ``search_kb``, ``recall_customer_facts``;
- write, reversible, medium risk: ``add_customer_note``, ``escalate_to_carrier``,
  ``remember_customer_fact``;
- write, high risk: ``issue_refund`` (approval from 20.00 up; smaller goodwill refunds
  go through without one), ``cancel_order``, ``update_shipping_address``,
  ``send_customer_reply`` (always approval).

Write tools use ``ctx.call_id`` (scoped by ``ctx.run_id``) as idempotency key: the same
call twice changes the shop once and returns the first result again. A rule the shop
enforces raises ``ShopRuleError`` whose message says why; the runtime hands it to the
model as an error result.

A company replaces this module with its own (``AGENTWEB_TOOLS``) to act on its real
systems. Besides its tools the module hands agentweb three domain pieces: ``CONTEXT_HINTS``
(facts, synonyms and the summary prompt for the context policy), ``demo_model()``, the
scripted model ``AGENTWEB_MODEL=demo`` plays (its scenarios live in ``tools.ticket.demo``),
and ``ticket_context(tickets)``, what the ticket pages show beside a ticket (the shop's
customer, order and memory, found through the ticket's ``fields``).
The claims validator is ``agentweb.shop.validators.claims_validator``; profiles name it.
"""

from typing import Any

from .demo import DemoModel
from .hints import HINTS as CONTEXT_HINTS
from .memory import recall_customer_facts, remember_customer_fact
from .panels import ticket_context
from .read import (
    check_inventory,
    get_customer,
    get_customer_notes,
    get_order,
    search_kb,
    track_shipment,
)
from .write import (
    REFUND_APPROVAL_THRESHOLD,
    add_customer_note,
    cancel_order,
    escalate_to_carrier,
    issue_refund,
    send_customer_reply,
    update_shipping_address,
)


def demo_model() -> Any:
    """The scripted ``demo`` model of this domain."""
    return DemoModel()


__all__ = [
    "CONTEXT_HINTS",
    "REFUND_APPROVAL_THRESHOLD",
    "add_customer_note",
    "cancel_order",
    "check_inventory",
    "demo_model",
    "escalate_to_carrier",
    "get_customer",
    "get_customer_notes",
    "get_order",
    "issue_refund",
    "recall_customer_facts",
    "remember_customer_fact",
    "search_kb",
    "send_customer_reply",
    "ticket_context",
    "track_shipment",
    "update_shipping_address",
]
