"""Benchmark: tool selection recall on a labelled set of support requests.

46 tools: the 14 bundled ticket tools (their real descriptions from ``tools.ticket`` when
Django is configured, as under ``make bench``; otherwise copies of their names and
descriptions) and 32 stubs of other support and e-commerce tools. 60 requests, written
the way customers and operators write tickets, each labelled with the tool(s) a good agent
needs first. For each scorer it prints the share of needed tools ranked in the top 8 (what
``LayeredContextPolicy`` offers at the first step, before any tool was used) and in the
top 3, and lists the misses.

    .venv/bin/python tests/bench/bench_selection.py [--json out.json] [--check]

Bar (issue 7 sets none): recall@8 >= 0.85 for BM25 with the ticket domain's synonyms, a
regression guard set after the first measurement (0.882; the set was written before the
scorer was run on it and has not been tuned to it). ``--check`` exits 1 under the bar.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentweb.runtime.gateway import ToolSpec  # noqa: E402
from agentweb.runtime.selection import BM25Scorer, ToolScorer, rank_tools  # noqa: E402


def _ticket_synonyms() -> dict[str, tuple[str, ...]]:
    """The ticket domain's synonym table (tools/ticket/hints.py is plain Python; loaded
    by path so that the Django-backed tool package is not imported)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ticket_hints", ROOT / "tools/ticket/hints.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.SYNONYMS)


BAR_RECALL_AT_8 = 0.85

# name, description, {argument: description}
BUNDLED_COPIES: list[tuple[str, str, dict[str, str]]] = [
    (
        "get_order",
        "Look up an order: status, items, amounts captured and refunded, address, shipments.",
        {"order_id": 'The order id the customer sees, e.g. "A1001".'},
    ),
    (
        "track_shipment",
        "Track a parcel: carrier status, delivery estimate and the carrier's scan events.",
        {"tracking_number": 'The carrier tracking number, e.g. "1Z999AA10123456784".'},
    ),
    (
        "get_customer",
        "Look up a customer: contact details, tier, default address and recent orders.",
        {"customer_id": 'The customer id, e.g. "C001".'},
    ),
    (
        "get_customer_notes",
        "Read the support team's notes about a customer, oldest first.",
        {"customer_id": 'The customer id, e.g. "C001".'},
    ),
    (
        "check_inventory",
        "Check stock of a product: units on hand, available, and the next restock date.",
        {"sku": 'The product SKU, e.g. "KIT-0101".'},
    ),
    (
        "search_kb",
        "Search the knowledge base (policies, how-tos) and return the best matching articles.",
        {"query": 'A few keywords, e.g. "return policy damaged item".'},
    ),
    (
        "recall_customer_facts",
        "Recall what earlier runs remembered about a customer (preferences, past escalations).",
        {"customer_id": 'The customer id, e.g. "C001".'},
    ),
    (
        "remember_customer_fact",
        "Remember a fact about a customer for future tickets; replaces the value of the same key.",
        {
            "customer_id": "The customer id.",
            "key": 'A short name, e.g. "preferred_contact" or "last_escalation".',
            "value": 'The fact, e.g. "phone, mornings only".',
        },
    ),
    (
        "add_customer_note",
        "Add an internal note to the customer's record (not visible to the customer).",
        {"customer_id": "The customer id.", "note": "The note, in a sentence or two."},
    ),
    (
        "escalate_to_carrier",
        "Open a trace with the carrier for a lost, late or misdelivered parcel.",
        {
            "tracking_number": "The carrier tracking number.",
            "reason": "What the carrier should investigate.",
        },
    ),
    (
        "issue_refund",
        "Refund money on an order to the original payment method. The refund can not exceed "
        "the amount captured minus earlier refunds. Refunds of 20.00 or more need a human's "
        "approval.",
        {
            "order_id": "The order id.",
            "amount": "The amount to refund in the order's currency, e.g. 24.99.",
            "reason": "Why, in a sentence (kept in the refunds ledger).",
        },
    ),
    (
        "cancel_order",
        "Cancel an order that has not shipped yet; the captured payment is refunded in full.",
        {"order_id": "The order id.", "reason": "Why the order is cancelled, in a sentence."},
    ),
    (
        "update_shipping_address",
        "Change the shipping address of an order that has not shipped yet.",
        {
            "order_id": "The order id.",
            "address": "The complete new address: street and number, postal code, city, country.",
        },
    ),
    (
        "send_customer_reply",
        "Send an email reply to the customer of the ticket being worked on. Only the "
        "ticket's own customer can be written to.",
        {
            "customer_id": "The customer id; must be the ticket's customer.",
            "message": "The full text of the reply, written to the customer.",
        },
    ),
]

OTHER_TOOLS: list[tuple[str, str, dict[str, str]]] = [
    (
        "list_customer_orders",
        "List a customer's orders, newest first, with date, status and total.",
        {"customer_id": "The customer id."},
    ),
    (
        "get_invoice",
        "Fetch the invoice of an order: invoice number, VAT lines, billing address and a PDF link.",
        {"order_id": "The order id."},
    ),
    (
        "resend_invoice",
        "Email a copy of an order's invoice to the billing address or another address.",
        {"order_id": "The order id.", "email": "Where to send it."},
    ),
    (
        "create_return_label",
        "Create a prepaid return shipping label (RMA) so the customer can send an item back.",
        {
            "order_id": "The order id.",
            "sku": "The item to return.",
            "reason": "Why it is returned.",
        },
    ),
    (
        "get_return_status",
        "Status of a return: label used, received at the warehouse, inspected, refunded.",
        {"return_id": "The return (RMA) id."},
    ),
    (
        "apply_discount_code",
        "Apply a promotion or coupon code to an order that is not paid yet.",
        {"order_id": "The order id.", "code": "The coupon code."},
    ),
    (
        "issue_store_credit",
        "Give the customer store credit (gift balance) as a goodwill gesture instead of a refund.",
        {"customer_id": "The customer id.", "amount": "The credit amount.", "reason": "Why."},
    ),
    (
        "get_payment_status",
        "Payment status of an order: authorised, captured, failed, disputed (chargeback).",
        {"order_id": "The order id."},
    ),
    (
        "retry_payment",
        "Retry a failed card payment on an order, or send the customer a new payment link.",
        {"order_id": "The order id."},
    ),
    (
        "update_customer_email",
        "Change the email address a customer logs in with and receives mail at.",
        {"customer_id": "The customer id.", "email": "The new email address."},
    ),
    (
        "reset_password",
        "Send the customer a link to reset the password of their shop account.",
        {"customer_id": "The customer id."},
    ),
    (
        "unsubscribe_marketing",
        "Remove a customer from newsletters and marketing emails.",
        {"customer_id": "The customer id."},
    ),
    (
        "delete_customer_data",
        "Erase a customer's personal data (GDPR right to be forgotten).",
        {"customer_id": "The customer id."},
    ),
    (
        "export_customer_data",
        "Export all personal data held about a customer (GDPR access request).",
        {"customer_id": "The customer id."},
    ),
    (
        "get_product",
        "Product details: description, size and dimensions, materials, compatibility and price.",
        {"sku": "The product SKU."},
    ),
    (
        "check_warranty",
        "Warranty coverage of a purchased product: what is covered and until when.",
        {"order_id": "The order id.", "sku": "The product SKU."},
    ),
    (
        "schedule_callback",
        "Book a phone call back from a support agent at a time the customer chooses.",
        {"customer_id": "The customer id.", "time": "When to call, ISO date and time."},
    ),
    (
        "create_ticket",
        "Open a new support ticket for a customer.",
        {"customer_id": "The customer id.", "subject": "Subject.", "body": "What it is about."},
    ),
    (
        "merge_tickets",
        "Merge a duplicate ticket into another ticket about the same issue.",
        {"ticket_id": "The duplicate.", "into_ticket_id": "The ticket to keep."},
    ),
    (
        "assign_ticket",
        "Route a ticket to another team: billing, technical support, logistics or management.",
        {"ticket_id": "The ticket id.", "team": "The team."},
    ),
    (
        "set_ticket_priority",
        "Set the priority of a ticket: low, normal, high or urgent.",
        {"ticket_id": "The ticket id.", "priority": "The priority."},
    ),
    (
        "get_loyalty_points",
        "Loyalty programme: points balance, tier and points about to expire.",
        {"customer_id": "The customer id."},
    ),
    (
        "redeem_loyalty_points",
        "Convert a customer's loyalty points into a voucher.",
        {"customer_id": "The customer id.", "points": "How many points."},
    ),
    (
        "find_nearest_store",
        "Shops and pickup points near a postal code, with opening hours.",
        {"postal_code": "The postal code."},
    ),
    (
        "get_delivery_slots",
        "Delivery dates and time windows available for a postal code.",
        {"postal_code": "The postal code."},
    ),
    (
        "change_delivery_date",
        "Reschedule the delivery of an order to another date or time window.",
        {"order_id": "The order id.", "date": "The new date."},
    ),
    (
        "exchange_item",
        "Exchange an item of an order for another size or colour of the same product.",
        {
            "order_id": "The order id.",
            "sku": "The item sent back.",
            "new_sku": "The item wanted instead.",
        },
    ),
    (
        "translate_text",
        "Translate a text into another language.",
        {"text": "The text.", "target_language": "The language, e.g. de."},
    ),
    (
        "price_match_request",
        "Record a price match claim when the customer found the product cheaper elsewhere.",
        {
            "sku": "The product SKU.",
            "competitor_url": "Where it is cheaper.",
            "price": "The lower price.",
        },
    ),
    (
        "notify_back_in_stock",
        "Notify the customer by email when an out-of-stock product is available again.",
        {"customer_id": "The customer id.", "sku": "The product SKU."},
    ),
    (
        "flag_order_for_fraud_review",
        "Hold an order and send it to the fraud team for review.",
        {"order_id": "The order id.", "reason": "What looks suspicious."},
    ),
    (
        "get_shipping_rates",
        "Shipping cost and delivery time quotes for a destination and parcel weight.",
        {"postal_code": "The destination postal code.", "weight_kg": "Parcel weight."},
    ),
]

# request -> the tools a good agent needs first (any order)
LABELLED: list[tuple[str, list[str]]] = [
    ("Where is my order A1007? It was supposed to arrive on Monday.", ["get_order"]),
    (
        "My parcel 1Z999AA10123456784 has not moved for a week, can you check with UPS?",
        ["track_shipment", "escalate_to_carrier"],
    ),
    (
        "The tracking page says delivered but nothing is at my door.",
        ["track_shipment", "escalate_to_carrier"],
    ),
    ("The blender I got is broken, I want my money back for order A1002.", ["issue_refund"]),
    ("Please cancel order A1010, I ordered the wrong colour by mistake.", ["cancel_order"]),
    (
        "I moved last week, can you send order A1011 to my new flat at Hauptstrasse 5, "
        "10115 Berlin?",
        ["update_shipping_address"],
    ),
    ("Do you still have the KIT-0101 garden hose in stock?", ["check_inventory"]),
    ("What is your return policy for sale items?", ["search_kb"]),
    ("Can you tell the customer that the replacement ships tomorrow?", ["send_customer_reply"]),
    (
        "Note on the account that she prefers to be called in the mornings.",
        ["add_customer_note", "remember_customer_fact"],
    ),
    (
        "Has this customer complained before? Check what the team wrote about C017.",
        ["get_customer_notes"],
    ),
    ("What do we know from earlier conversations with customer C003?", ["recall_customer_facts"]),
    (
        "Look up customer C044: which tier are they and what is their default address?",
        ["get_customer"],
    ),
    ("Show me all orders of customer C009 from this year.", ["list_customer_orders"]),
    ("I need an invoice with VAT for order A1020 for my company's accounting.", ["get_invoice"]),
    (
        "I never received the invoice email, can you send it again to billing@acme.example?",
        ["resend_invoice"],
    ),
    ("How do I send back the shoes? They are too small.", ["create_return_label", "exchange_item"]),
    (
        "I returned the jacket two weeks ago, has it arrived at your warehouse? Return R-5521.",
        ["get_return_status"],
    ),
    (
        "My coupon SPRING10 did not work at checkout, order A1030 is not paid yet.",
        ["apply_discount_code"],
    ),
    (
        "As a goodwill gesture give her 10 euros of store credit for the trouble.",
        ["issue_store_credit"],
    ),
    ("My card was charged twice for order A1031!", ["get_payment_status"]),
    ("The payment for my order failed, can I try again?", ["retry_payment"]),
    ("I changed jobs, please update my email to lena@newmail.example.", ["update_customer_email"]),
    ("I can't log in, I forgot my password.", ["reset_password"]),
    ("Stop sending me newsletters.", ["unsubscribe_marketing"]),
    (
        "Please delete all my personal data, I invoke my GDPR right to erasure.",
        ["delete_customer_data"],
    ),
    ("I want a copy of all the data you store about me.", ["export_customer_data"]),
    ("Is the KIT-0207 tent big enough for four people? What are its dimensions?", ["get_product"]),
    (
        "My coffee machine stopped working after 8 months, is it still under warranty?",
        ["check_warranty"],
    ),
    (
        "Can someone call me tomorrow at 10 am? It is easier to explain on the phone.",
        ["schedule_callback"],
    ),
    ("Open a separate ticket for the damaged lamp so we can follow it up.", ["create_ticket"]),
    ("This ticket is a duplicate of T-881, combine them.", ["merge_tickets"]),
    ("This is a billing question, hand it over to the billing team.", ["assign_ticket"]),
    (
        "The customer is furious and threatens a chargeback, mark this ticket urgent.",
        ["set_ticket_priority"],
    ),
    ("How many bonus points do I have and when do they expire?", ["get_loyalty_points"]),
    ("I want to use my points for a voucher.", ["redeem_loyalty_points"]),
    (
        "Is there a shop or pickup point near 80331 where I can collect the order?",
        ["find_nearest_store"],
    ),
    ("What delivery days are available for postcode 20095?", ["get_delivery_slots"]),
    (
        "I won't be home on Friday, can you deliver order A1040 next week instead?",
        ["change_delivery_date"],
    ),
    ("Can I swap the M shirt for an L?", ["exchange_item"]),
    ("The customer wrote in Spanish, put our answer into Spanish please.", ["translate_text"]),
    (
        "I found the same drill 20 euros cheaper at another store, will you match it?",
        ["price_match_request"],
    ),
    ("The red kettle is sold out, let me know when it is back.", ["notify_back_in_stock"]),
    (
        "This order has a different billing and shipping country and three cards were "
        "tried, looks suspicious.",
        ["flag_order_for_fraud_review"],
    ),
    ("How much does shipping a 12 kg parcel to Vienna cost?", ["get_shipping_rates"]),
    (
        "I was charged for order A1050 but I cancelled it before it shipped, where is my refund?",
        ["get_order", "issue_refund"],
    ),
    ("The courier left my package at the wrong address.", ["escalate_to_carrier"]),
    ("Order A1060 arrived with a cracked screen, what can you do?", ["get_order", "issue_refund"]),
    (
        "Remember for next time that this customer only wants contact by email.",
        ["remember_customer_fact"],
    ),
    (
        "Reply to the customer that we refunded 24.99 and apologise for the delay.",
        ["send_customer_reply"],
    ),
    ("Is the espresso grinder available again, and when is the next restock?", ["check_inventory"]),
    ("How long do refunds take to show up on my credit card?", ["search_kb"]),
    ("I don't want the order anymore, it hasn't shipped yet.", ["cancel_order"]),
    (
        "Please change the delivery address on my order, there is a typo in the street name.",
        ["update_shipping_address"],
    ),
    (
        "Customer asks for the status of order A1077 and wants to know what was refunded already.",
        ["get_order"],
    ),
    (
        "Still waiting for my package, it's been 3 weeks, this is ridiculous.",
        ["track_shipment", "escalate_to_carrier"],
    ),
    (
        "Can you check whether this buyer had problems with deliveries before?",
        ["get_customer_notes", "recall_customer_facts"],
    ),
    ("I was promised a partial refund of 15 euros for the missing cable.", ["issue_refund"]),
    ("The product page doesn't say whether the charger works with 110 V.", ["get_product"]),
    (
        "Please let the customer know their return was received and the refund is on its way.",
        ["send_customer_reply"],
    ),
]


def bundled_specs() -> tuple[list[ToolSpec], str]:
    """The real bundled tool specs when Django can be set up, else the copies above."""
    try:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentweb.settings")
        os.environ.setdefault("DEBUG", "1")  # only to read tool descriptions: no server here
        import django

        django.setup()
        from agentweb.runtime.tools import load_tools

        registry = load_tools(["tools.ticket"])
        return registry.specs(), "tools.ticket (real descriptions)"
    except Exception as exc:  # no settings here: measure on the copies
        return [_spec(*t) for t in BUNDLED_COPIES], f"copies ({type(exc).__name__})"


def _spec(name: str, description: str, args: dict[str, str]) -> ToolSpec:
    props = {a: {"type": "string", "description": d} for a, d in args.items()}
    return ToolSpec(name, description, {"type": "object", "properties": props})


def evaluate(scorer: ToolScorer, specs: list[ToolSpec]) -> dict[str, Any]:
    hits8 = hits3 = total = 0
    any8 = 0
    misses: list[str] = []
    reciprocal: list[float] = []
    timings: list[float] = []
    for text, needed in LABELLED:
        started = time.perf_counter()
        ranked = [s.name for s, _ in rank_tools(scorer, text, specs)]
        timings.append((time.perf_counter() - started) * 1e6)
        found_any = False
        for name in needed:
            total += 1
            pos = ranked.index(name)
            reciprocal.append(1 / (pos + 1))
            if pos < 8:
                hits8 += 1
                found_any = True
            else:
                misses.append(f"{name} at #{pos + 1} for {text!r}")
            if pos < 3:
                hits3 += 1
        any8 += found_any
    return {
        "recall_at_8": hits8 / total,
        "recall_at_3": hits3 / total,
        "any_needed_in_top_8": any8 / len(LABELLED),
        "mrr": statistics.mean(reciprocal),
        "pairs": total,
        "median_us": statistics.median(timings),
        "misses": misses,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 when under the bar")
    args = parser.parse_args()
    bundled, source = bundled_specs()
    specs = bundled + [_spec(*t) for t in OTHER_TOOLS]
    names = {s.name for s in specs}
    assert len(names) == len(specs) >= 40, "tool names must be unique"
    for _, needed in LABELLED:
        assert set(needed) <= names, needed
    print(f"{len(LABELLED)} requests, {len(specs)} tools; bundled tools from {source}")
    results = {}
    for label, scorer in (
        ("BM25 + ticket synonyms", BM25Scorer(synonyms=_ticket_synonyms())),
        ("BM25 without synonyms", BM25Scorer(synonyms={})),
    ):
        r = evaluate(scorer, specs)
        results[label] = r
        print(
            f"{label:27s} recall@8 {r['recall_at_8']:.3f}  recall@3 {r['recall_at_3']:.3f}  "
            f"a needed tool in top 8 {r['any_needed_in_top_8']:.3f}  MRR {r['mrr']:.3f}  "
            f"({r['pairs']} request/tool pairs; ranking {r['median_us']:.0f} µs median)"
        )
        for miss in r["misses"]:
            print(f"    miss: {miss}")
    default = results["BM25 + ticket synonyms"]
    ok = default["recall_at_8"] >= BAR_RECALL_AT_8
    print(
        f"bar: recall@8 >= {BAR_RECALL_AT_8:.2f} with BM25 + the ticket domain's synonyms: "
        f"{'met' if ok else 'MISSED'}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
