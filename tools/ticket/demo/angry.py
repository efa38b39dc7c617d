"""An upset repeat contact: read the history, one concrete action, note it, reply."""

from __future__ import annotations

import re
from typing import Any

from .conversation import Act, Answer, Conversation, Plan
from .helpers import (
    day_of,
    finish,
    letter,
    need_order,
    once,
    reply_once,
    shipment_status,
)


def plan_angry(c: Conversation) -> Plan:
    customer = c.customer_id
    if customer is None:
        order = need_order(c, "An upset customer. I'll find the order first.")
        if isinstance(order, Act | Answer):
            return order
        customer = c.customer_id
    if customer and not c.tried("get_customer_notes"):
        calls = [
            ("get_customer", {"customer_id": customer}, "who they are"),
            ("get_customer_notes", {"customer_id": customer}, "earlier contacts"),
        ]
        if "recall_customer_facts" in c.offered:
            calls.append(("recall_customer_facts", {"customer_id": customer}, "memory"))
        return Act(
            calls,
            "The customer is clearly upset and says this isn't the first contact. Before "
            "anything else I'll read their history: profile, notes and what we remembered.",
        )
    order = need_order(c, "Now the order they're writing about.")
    if isinstance(order, Act | Answer):
        return order
    notes = (c.ok("get_customer_notes") or {}).get("notes") or []
    facts = {f["key"]: f["value"] for f in (c.ok("recall_customer_facts") or {}).get("facts", [])}
    profile = c.ok("get_customer") or {}
    track: dict[str, Any] = {}
    trace_id = None
    oid = order["order_id"] if order else None
    if order:
        shipments = order.get("shipments") or []
        if shipments and not c.tried("track_shipment"):
            return Act(
                [("track_shipment", {"tracking_number": shipments[-1]["tracking_number"]}, "")],
                f"{len(notes)} earlier notes on file. Let me see where {oid} actually is.",
            )
        track = c.ok("track_shipment") or {}
        events = track.get("events") or []
        last_event = events[-1] if events else {}
        open_trace = next((e for e in track.get("escalations", []) if e["status"] == "open"), None)
        trace_id = (open_trace or {}).get("escalation_id")
        late = track.get("status") == "exception" or (
            track.get("status") in ("in_transit", "label_created")
            and any(re.search(r"promised|eta|delay", n["note"], re.I) for n in notes)
        )
        if track and late and open_trace is None:
            plan = once(
                c,
                "escalate_to_carrier",
                {
                    "tracking_number": track["tracking_number"],
                    "reason": f"Repeat complaint ({len(notes) + 1} contacts). Last scan "
                    f"{day_of(last_event.get('at'))}: {last_event.get('description', '?')}. "
                    "Please prioritise delivery.",
                },
                "priority trace",
                f"{oid} is {shipment_status(track.get('status'))} and we've already made "
                "promises we didn't keep. One concrete action now: a priority trace with the "
                "carrier.",
            )
            if plan:
                return plan
            trace_id = (c.ok("escalate_to_carrier") or {}).get("escalation_id") or trace_id
    contacts = len(notes) + 1
    if customer and not c.tried("add_customer_note"):
        calls = [
            (
                "add_customer_note",
                {
                    "customer_id": customer,
                    "note": f"Contact #{contacts} about {oid or 'their order'}, customer upset. "
                    + (f"Priority carrier trace {trace_id} opened. " if trace_id else "")
                    + "Replied by email with a concrete next step.",
                },
                "note",
            )
        ]
        if "remember_customer_fact" in c.offered:
            calls.append(
                (
                    "remember_customer_fact",
                    {
                        "customer_id": customer,
                        "key": "escalation_history",
                        "value": f"{contacts} contacts about {oid or 'an order'}"
                        + (f"; trace {trace_id}" if trace_id else "")
                        + "; handle with priority",
                    },
                    "remember",
                )
            )
        return Act(calls, "I'll record this contact and remember it for whoever is next.")
    contact = facts.get("preferred_contact")
    status_text = ""
    if track:
        status_text = (
            f"Your parcel ({track.get('carrier')} {track.get('tracking_number')}) is "
            f"{shipment_status(track.get('status'))}."
        )
    plan = reply_once(
        c,
        letter(
            c,
            "I'm sorry. You've had to contact us "
            + (f"{contacts} times" if contacts > 1 else "again")
            + " about this, and that is not the service we want to give you.",
            status_text
            + (
                f" I've opened a priority investigation with the carrier today (reference "
                f"{trace_id}), and I'll personally follow up as soon as they answer, within "
                "2 business days."
                if trace_id
                else " I'm following this up myself."
            ),
            "We'll keep to email as you asked." if contact and "email" in contact else "",
        ),
        "Now a reply that acknowledges the history and gives one concrete next step.",
    )
    if plan:
        return plan
    tier = profile.get("tier")
    return finish(
        c,
        f"Repeat contact ({contacts}) from an upset {tier or ''} customer about "
        f"{oid or 'an order'}." + (f" Remembered preference: {contact}." if contact else ""),
    )
