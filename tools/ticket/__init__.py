"""The bundled ticket tools: they act on the demo shop (``agentweb.shop``).

Names, argument names and risk levels are part of the contract (DESIGN §4):

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
systems.
"""

from .memory import recall_customer_facts, remember_customer_fact
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

__all__ = [
    "REFUND_APPROVAL_THRESHOLD",
    "add_customer_note",
    "cancel_order",
    "check_inventory",
    "escalate_to_carrier",
    "get_customer",
    "get_customer_notes",
    "get_order",
    "issue_refund",
    "recall_customer_facts",
    "remember_customer_fact",
    "search_kb",
    "send_customer_reply",
    "track_shipment",
    "update_shipping_address",
]
