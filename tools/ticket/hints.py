"""What the ticket domain tells the runtime's context policy: which values are facts
worth pinning, which arguments are money, which words customers use for what the tools
do, and how to summarize a support run. The runtime itself knows none of these words."""

from __future__ import annotations

from agentweb.runtime.context import ContextHints

#: Keys whose values are pinned when they appear in tool arguments or results.
FACT_KEYS = (
    "order_id",
    "customer_id",
    "tracking_number",
    "sku",
    "ticket_id",
    "refund_id",
    "return_id",
    "invoice_id",
)
#: Ids written in the ticket or the model's text; group 1 is the value.
FACT_PATTERNS = {
    "order_id": r"(?i)\border\s*(?:id|no\.?|number|#)?\s*[:#]?\s*([A-Z]{1,4}-?\d{3,}|\d{4,})\b",
    "customer_id": r"(?i)\bcustomer\s*(?:id|no\.?|number|#)?\s*[:#]?\s*([A-Z]{1,4}-?\d{2,})\b",
    "tracking_number": r"\b(1Z[0-9A-Z]{16})\b",
}
MONEY_KEYS = ("refund_amount",)

#: Tool ranking: a word a customer uses -> words the ticket tools are described with.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "money": ("refund", "payment"),
    "reimburse": ("refund",),
    "compensat": ("refund", "credit"),
    "parcel": ("shipment", "track"),
    "package": ("shipment", "track"),
    "deliver": ("shipment", "carrier"),
    "delivery": ("shipment", "carrier"),
    "where": ("track", "shipment", "status"),
    "late": ("shipment", "carrier", "trace"),
    "lost": ("shipment", "carrier", "trace"),
    "missing": ("shipment", "trace"),
    "stuck": ("shipment", "carrier"),
    "delay": ("shipment", "carrier"),
    "broken": ("damage", "return", "refund"),
    "damage": ("return", "refund"),
    "defective": ("damage", "return", "warranty"),
    "email": ("reply", "message", "send"),
    "write": ("reply", "message", "send"),
    "tell": ("reply", "message", "send"),
    "inform": ("reply", "message", "send"),
    "respond": ("reply", "message"),
    "stock": ("inventory",),
    "available": ("inventory", "stock"),
    "availability": ("inventory", "stock"),
    "move": ("address", "shipping"),
    "policy": ("knowledge", "article"),
    "rule": ("knowledge", "policy"),
    "remember": ("note", "fact"),
    "charge": ("payment", "invoice"),
    "bill": ("invoice", "payment"),
    "paid": ("payment",),
    "pay": ("payment",),
    "account": ("customer",),
    "profile": ("customer",),
    "buyer": ("customer",),
    "client": ("customer",),
    "purchase": ("order",),
    "bought": ("order",),
    "stop": ("cancel",),
}

SUMMARY_PROMPT = (
    "You compress the earlier part of an AI agent's work on a customer-support ticket. "
    "Write a factual summary of at most {words} words: what was looked up and found "
    "(order, customer and tracking ids, statuses, amounts, dates), what was done, what a "
    "human approved or rejected and why, and what is still open for the customer. Keep "
    "every id and amount exactly. No advice, no instructions, no preamble."
)

HINTS = ContextHints(
    fact_keys=FACT_KEYS,
    fact_patterns=FACT_PATTERNS,
    money_keys=MONEY_KEYS,
    synonyms=SYNONYMS,
    summary_prompt=SUMMARY_PROMPT,
)
