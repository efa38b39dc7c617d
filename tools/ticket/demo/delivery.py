"""Where is my parcel, it never arrived: track it, trace it when late, lost or stuck, reply."""

from __future__ import annotations

import re
from typing import Any

from .conversation import Act, Answer, Conversation, Plan
from .helpers import (
    day_of,
    days_between,
    finish,
    letter,
    need_order,
    once,
    reply_once,
    shipment_status,
)


def plan_delivery(c: Conversation, claimed_missing: bool) -> Plan:
    order = need_order(
        c,
        "The customer is asking about a delivery. I'll start with the order to find the "
        "shipment and its tracking number.",
    )
    if order is None:
        return Answer(
            "I could not tell which order the customer means: the ticket names no order and "
            "no customer I can look up. Ask them for the order number (it looks like A1001)."
        )
    if not isinstance(order, dict):
        return order
    oid = order["order_id"]
    shipments = order.get("shipments") or []
    if not shipments:
        if order.get("status") == "cancelled":
            plan = reply_once(
                c,
                letter(c, f"Your order {oid} was cancelled on {day_of(order.get('cancelled_at'))}"
                        ", so it will not be delivered. If that is a surprise, just reply and "
                        "we'll sort it out together."),
                "The order was cancelled, so nothing is on its way; I'll tell the customer.",
            )  # fmt: skip
            return plan or finish(c, f"Order {oid} is cancelled; nothing was shipped.")
        plan = reply_once(
            c,
            letter(c, f"Your order {oid} hasn't left our warehouse yet. As soon as it ships "
                    "you'll get an email with the tracking number."),
            f"Order {oid} has not shipped yet, so there is no tracking. I'll let the customer "
            "know.",
        )  # fmt: skip
        return plan or finish(c, f"Order {oid} ({order.get('status')}) has not shipped yet.")
    tracking = shipments[-1]["tracking_number"]
    track = c.ok("track_shipment")
    if track is None and not c.tried("track_shipment"):
        return Act(
            [("track_shipment", {"tracking_number": tracking}, "track the parcel")],
            f"Order {oid} shipped with {shipments[-1]['carrier']} under {tracking}. Let me see "
            "the carrier's scans.",
        )
    if track is None:
        return finish(
            c, f"I could not get tracking for {tracking}: {c.failed('track_shipment') or 'n/a'}"
        )
    status = track.get("status")
    events = track.get("events") or []
    last_event = events[-1] if events else {}
    open_trace = next((e for e in track.get("escalations", []) if e["status"] == "open"), None)
    if status == "delivered" and not claimed_missing:
        return plan_delivered(c, order, track, last_event)
    if status == "delivered":
        return plan_delivered_missing(c, order, track, last_event, open_trace)
    if status == "exception":
        return plan_stuck(c, order, track, last_event, open_trace)
    eta = track.get("estimated_delivery")
    where = f"{last_event.get('description', 'in transit')} in {last_event.get('location', '?')}"
    late = days_between(eta, c.today)
    if late >= 2:
        return plan_late(c, order, track, last_event, open_trace, late)
    plan = reply_once(
        c,
        letter(
            c,
            f"Your order {oid} is on its way with {track.get('carrier')} (tracking "
            f"{tracking}). The latest scan: {where} on {day_of(last_event.get('at'))}. The "
            f"carrier expects to deliver it by {day_of(eta)}.",
            "If it hasn't arrived two days after that date, reply to this email and we'll "
            "open a trace with the carrier right away.",
        ),
        f"The parcel is moving normally ({status}, expected {day_of(eta)}); no action is "
        "needed besides telling the customer where it is.",
    )
    if plan:
        return plan
    headline = (
        f"Order {oid} is {shipment_status(status)} with "
        f"{track.get('carrier')} ({tracking}), expected by {day_of(eta)}."
    )
    if claimed_missing:
        headline += " It has not been marked delivered yet, so it is not missing."
    return finish(c, headline)


def plan_late(
    c: Conversation,
    order: dict[str, Any],
    track: dict[str, Any],
    last_event: dict[str, Any],
    open_trace: dict[str, Any] | None,
    late: int,
) -> Plan:
    """In transit but past its delivery date: trace it, then tell the customer."""
    oid, tracking, eta = order["order_id"], track["tracking_number"], track["estimated_delivery"]
    if open_trace is None:
        plan = once(
            c,
            "escalate_to_carrier",
            {
                "tracking_number": tracking,
                "reason": f"Expected by {eta}, now {late} days late. Last scan "
                f"{day_of(last_event.get('at'))}: {last_event.get('description', '?')} in "
                f"{last_event.get('location', '?')}. Please locate and deliver.",
            },
            "trace a late parcel",
            f"The carrier expected to deliver {oid} by {eta}; it is {late} days late and the "
            f"last scan was on {day_of(last_event.get('at'))}. I'll open a trace.",
        )
        if plan:
            return plan
    trace_id = ((c.ok("escalate_to_carrier") or open_trace) or {}).get("escalation_id")
    plan = reply_once(
        c,
        letter(
            c,
            f"I'm sorry, your order {oid} is running late. {track.get('carrier')} expected to "
            f"deliver it by {eta}; its last scan was on {day_of(last_event.get('at'))} in "
            f"{last_event.get('location', 'transit')}.",
            (
                f"We've asked the carrier to locate it (reference {trace_id}); they usually "
                "answer within 2 business days. "
                if trace_id
                else ""
            )
            + "If it can't be found, we'll send a replacement or refund you, as you prefer.",
        ),
        "Trace opened. I'll tell the customer honestly that it's late and what we're doing.",
    )
    return plan or finish(c, f"Order {oid} ({tracking}) is {late} days late; traced.")


def plan_delivered(
    c: Conversation, order: dict[str, Any], track: dict[str, Any], last_event: dict[str, Any]
) -> Plan:
    """Asked where it is, and it was delivered: say when and how; nothing to trace (the
    customer has not said it is missing)."""
    oid, tracking = order["order_id"], track["tracking_number"]
    delivered = day_of(track.get("delivered_at") or last_event.get("at"))
    how = last_event.get("description") or "delivered"
    plan = reply_once(
        c,
        letter(
            c,
            f"Your order {oid} was delivered on {delivered} by {track.get('carrier')} "
            f'(tracking {tracking}): "{how}".',
            "If you can't find it, please check with neighbours or around the building, and "
            "reply to this email if it doesn't turn up: we'll ask the carrier to trace it.",
        ),
        f"{track.get('carrier')} delivered {oid} on {delivered}; the customer only asked "
        "where it is, so I'll tell them, with what to do if they can't find it.",
    )
    return plan or finish(
        c, f'Order {oid} was delivered on {delivered} ({track.get("carrier")} {tracking}: "{how}").'
    )


def plan_delivered_missing(
    c: Conversation,
    order: dict[str, Any],
    track: dict[str, Any],
    last_event: dict[str, Any],
    open_trace: dict[str, Any] | None,
) -> Plan:
    oid, tracking, customer = order["order_id"], track["tracking_number"], order["customer_id"]
    delivered = day_of(track.get("delivered_at"))
    if not c.tried("get_customer_notes"):
        calls = [("get_customer_notes", {"customer_id": customer}, "check earlier contacts")]
        if "recall_customer_facts" in c.offered:
            calls.append(("recall_customer_facts", {"customer_id": customer}, "recall facts"))
        return Act(
            calls,
            f"{track.get('carrier')} marked {tracking} delivered on {delivered} "
            f'("{last_event.get("description", "delivered")}"). Before I open a trace I\'ll '
            "check the customer's history for earlier missing-parcel claims.",
        )
    notes = (c.ok("get_customer_notes") or {}).get("notes") or []
    earlier = [
        n for n in notes
        if re.search(r"not received|never arrived|missing|marked delivered", n["note"], re.I)
    ]  # fmt: skip
    if open_trace is None:
        plan = once(
            c,
            "escalate_to_carrier",
            {
                "tracking_number": tracking,
                "reason": f"Marked delivered on {delivered} "
                f"({last_event.get('description', 'delivered')}), but the customer reports "
                "the parcel never arrived. Please confirm the delivery location (GPS/photo) "
                "and trace the parcel.",
            },
            "open a carrier trace",
            "Nothing suggests a problem with the address, so I'll open a trace with "
            f"{track.get('carrier')}."
            + (
                f" Note: there is {len(earlier)} earlier missing-parcel claim on file; I'll "
                "flag it for the team rather than refund straight away."
                if earlier
                else ""
            ),
        )
        if plan:
            return plan
    trace = c.ok("escalate_to_carrier") or open_trace
    trace_id = (trace or {}).get("escalation_id")
    if trace_id and "remember_customer_fact" in c.offered:
        plan = once(
            c,
            "remember_customer_fact",
            {
                "customer_id": customer,
                "key": "last_carrier_trace",
                "value": f"{trace_id} for {oid} ({tracking}): marked delivered {delivered}, "
                "customer says not received",
            },
            "remember the trace",
            "I'll remember this trace on the customer so the next colleague sees it.",
        )
        if plan:
            return plan
    trace_text = (
        f"We have opened an investigation with {track.get('carrier')} (reference {trace_id}); "
        "they usually answer within 2 business days."
        if trace_id
        else "We are looking into it with the carrier."
    )
    plan = reply_once(
        c,
        letter(
            c,
            f"I'm sorry your order {oid} hasn't reached you. {track.get('carrier')} recorded it "
            f'as delivered on {delivered} ("{last_event.get("description", "delivered")}").',
            "Parcels marked delivered sometimes turn up within a day or two, so please check "
            f"once more around the building. {trace_text}",
            "If the carrier can't find it, we'll send a replacement or refund the order, "
            "whichever you prefer.",
        ),
        "Trace is open. Now I'll let the customer know what happens next.",
    )
    if plan:
        return plan
    headline = f"Order {oid}: marked delivered on {delivered}, customer says it never arrived."
    if earlier:
        headline += (
            f" The customer has {len(earlier)} earlier missing-parcel claim(s) on file: a team "
            "lead should review before any reship or refund."
        )
    else:
        headline += " No earlier claims on file; reship or refund if the trace finds nothing."
    return finish(c, headline)


def plan_stuck(
    c: Conversation,
    order: dict[str, Any],
    track: dict[str, Any],
    last_event: dict[str, Any],
    open_trace: dict[str, Any] | None,
) -> Plan:
    oid, tracking = order["order_id"], track["tracking_number"]
    if open_trace is None:
        plan = once(
            c,
            "escalate_to_carrier",
            {
                "tracking_number": tracking,
                "reason": f"Parcel stuck since {day_of(last_event.get('at'))}: "
                f"{last_event.get('description', 'delivery exception')}. Please deliver or "
                "return it urgently.",
            },
            "open a carrier trace",
            f'The parcel is held with an exception ("{last_event.get("description")}"). '
            "I'll open a trace with the carrier.",
        )
        if plan:
            return plan
    trace = c.ok("escalate_to_carrier") or open_trace or {}
    trace_id = trace.get("escalation_id")
    plan = reply_once(
        c,
        letter(
            c,
            f"I'm sorry for the wait. Your order {oid} is held at a {track.get('carrier')} "
            f"facility ({last_event.get('location', 'in transit')}) because of a problem "
            "with the shipping label.",
            (f"We've asked the carrier to fix it and deliver it (reference {trace_id}); they "
             "usually answer within 2 business days. " if trace_id else "")
            + "We'll update you as soon as it moves, and if it can't be delivered we'll send "
            "a replacement.",
        ),
        "I'll tell the customer what is holding the parcel and what we're doing about it.",
    )  # fmt: skip
    return plan or finish(
        c,
        f"Order {oid} ({tracking}) is held with a delivery exception: "
        f"{last_event.get('description', '?')}.",
    )
