"""Delegation: a coordinator splits a ticket about a late parcel *and* a
billing problem between a shipping and a billing specialist, who work in parallel with
the read tools only, then refunds what billing found due and writes the one reply.

The specialists' answers end with machine-readable lines the coordinator reads back:
``For the customer: ...`` (a sentence it may quote) and, from billing, ``Due back: 12.00``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .conversation import Act, Answer, Conversation, Plan
from .helpers import day_of, dec, finish, letter, need_order, reply_once, shipment_status

SHIPPING, BILLING = "shipping-specialist", "billing-specialist"
SHIPPING_TASK = "Shipping check for order"
BILLING_TASK = "Billing check for order"

_LATE = (
    "late", "hasn't arrived", "has not arrived", "not arrived", "still waiting",
    "where is my", "tracking has not moved", "tracking hasn't moved", "delayed",
)  # fmt: skip
_BILLING = (
    "charged twice", "double charged", "double-charged", "duplicate charge", "billed twice",
    "two charges", "overcharged", "wrong amount", "billing",
)  # fmt: skip
_CUSTOMER = re.compile(r"^For the customer:\s*(.+)$", re.MULTILINE)
_DUE = re.compile(r"^Due back:\s*([0-9]+(?:\.[0-9]+)?)", re.MULTILINE)


def wants_delegation(c: Conversation) -> bool:
    """A coordinator (it may delegate) on a ticket with both a delivery and a billing part."""
    return (
        "delegate_task" in c.offered
        and any(w in c.text for w in _LATE)
        and any(w in c.text for w in _BILLING)
    )


def plan_coordinate(c: Conversation) -> Plan:
    oid = c.order_id
    if oid is None:
        return Answer(
            "The ticket is about a late parcel and a charge, but names no order. Ask the "
            "customer for the order number (it looks like A1001); nothing was changed."
        )
    delegated = [s for s in c.steps if s.call.name == "delegate_task"]
    if not delegated:
        quoted = " ".join(c.body.split())[:400]
        return Act(
            [
                (
                    "delegate_task",
                    {
                        "agent": SHIPPING,
                        "task": f'{SHIPPING_TASK} {oid}. The customer writes: "{quoted}" '
                        "Find the shipment and its latest tracking, and report its status, "
                        "the estimated delivery and how late it is. Change nothing.",
                    },
                    "hand the delivery question to the shipping specialist",
                ),
                (
                    "delegate_task",
                    {
                        "agent": BILLING,
                        "task": f'{BILLING_TASK} {oid}. The customer writes: "{quoted}" '
                        "Compare the order total with the captured payments and refunds, and "
                        "report whether a charge is duplicated and how much is due back. "
                        "Change nothing.",
                    },
                    "hand the charge to the billing specialist",
                ),
            ],
            "This ticket has two separate problems: a late parcel and a charge. I'll hand each "
            "to its specialist; they work at the same time.",
        )
    task_ids = [s.result.get("task_id") for s in delegated if s.ok]
    if not task_ids:
        errors = "; ".join(s.error for s in delegated if s.error) or "no task started"
        return finish(c, f"I could not hand the work to the specialists ({errors}).")
    wait = c.last("wait_for_tasks")
    if wait is None:
        return Act(
            [("wait_for_tasks", {"task_ids": task_ids}, "collect the specialists' findings")],
            "Both specialists are on it. I'll wait for their findings before I write to the "
            "customer.",
        )
    if not wait.done or not wait.ok:
        return finish(c, f"I could not collect the specialists' findings: {wait.error}")
    agents = {s.result.get("task_id"): s.call.arguments.get("agent") for s in delegated if s.ok}
    findings = _findings(wait.result, agents)
    shipping, billing = findings.get(SHIPPING, {}), findings.get(BILLING, {})
    due = _due(billing)
    if due > 0:
        refund = c.last("issue_refund")
        if refund is None:
            return Act(
                [
                    (
                        "issue_refund",
                        {"order_id": oid, "amount": float(due), "reason": "Duplicate charge."},
                        f"refund the duplicate {due:.2f} on {oid}",
                    )
                ],
                f"Billing found {due:.2f} charged twice on {oid}. I'll refund it before I "
                "write the reply.",
            )
    refunded = c.ok("issue_refund")
    parts = [_customer_line(shipping) or "I'm still checking where your parcel is."]
    if refunded is not None:
        parts.append(
            f"You were right about the charge: we've refunded the duplicate "
            f"{refunded.get('amount')} {refunded.get('currency', '')}; it shows on your "
            "statement within 3 to 5 business days."
        )
    elif due > 0:
        parts.append(
            "You were charged twice. A colleague is reviewing the refund of the duplicate "
            "and will confirm it to you."
        )
    else:
        parts.append(_customer_line(billing) or "I'm still checking the charge.")
    plan = reply_once(
        c,
        letter(c, *parts),
        "I have both findings; one reply to the customer covers the parcel and the charge.",
    )
    if plan:
        return plan
    report = "\n".join(
        f"- {who}: {_status_line(f)}"
        for who, f in (("Shipping specialist", shipping), ("Billing specialist", billing))
    )
    return finish(c, f"Delegated the two parts of the ticket on {oid}:\n{report}")


def _findings(result: dict[str, Any], agents: dict[Any, Any]) -> dict[str, dict[str, Any]]:
    """The wait's results by the agent each task went to."""
    rows = result.get("result")
    return {
        str(agents.get(row.get("task_id"))): row
        for row in (rows if isinstance(rows, list) else [])
        if isinstance(row, dict)
    }


def _customer_line(finding: dict[str, Any]) -> str | None:
    m = _CUSTOMER.search(str(finding.get("result") or ""))
    return m.group(1).strip() if m else None


def _due(finding: dict[str, Any]) -> Any:
    m = _DUE.search(str(finding.get("result") or ""))
    return dec(m.group(1)) if m else dec(0)


def _status_line(finding: dict[str, Any]) -> str:
    if not finding:
        return "no result"
    if finding.get("status") != "succeeded":
        return f"failed ({finding.get('error')})"
    first = str(finding.get("result") or "").strip().splitlines()
    return first[0] if first else "done"


# --- the specialists (read tools only) ----------------------------------------------------


def plan_shipping_check(c: Conversation) -> Plan:
    order = need_order(c, "I'll look up the order to find its shipment.")
    if not isinstance(order, dict):
        return order or Answer("I could not tell which order to check.")
    oid = order["order_id"]
    shipments = order.get("shipments") or []
    if not shipments:
        return Answer(
            f"Order {oid} has not shipped yet.\n"
            f"For the customer: Your order {oid} hasn't left our warehouse yet; you'll get "
            "the tracking number by email as soon as it ships."
        )
    number = shipments[-1]["tracking_number"]
    if not c.tried("track_shipment"):
        return Act(
            [("track_shipment", {"tracking_number": number}, "read the latest tracking")],
            f"Order {oid} shipped with {shipments[-1].get('carrier')}; I'll read the tracking.",
        )
    track = c.ok("track_shipment")
    if track is None:
        return Answer(f"Tracking {number} could not be read: {c.failed('track_shipment')}")
    eta = day_of(track.get("estimated_delivery"))
    events = track.get("events") or []
    last = events[-1] if events else {}
    status = shipment_status(track.get("status"))
    late = c.today is not None and eta and eta < c.today and not track.get("delivered_at")
    return Answer(
        f"Order {oid}: {track.get('carrier')} {number} is {status}; estimated delivery was "
        f"{eta or 'not given'}{' (late)' if late else ''}. Latest scan: "
        f"{last.get('description', 'none')} in {last.get('location', 'an unknown place')} on "
        f"{day_of(last.get('at'))}.\n"
        f"For the customer: Your parcel ({track.get('carrier')} {number}) is {status}; it was "
        f"due on {eta or 'a date the carrier has not given'}, and we're keeping an eye on it "
        "with the carrier."
    )


def plan_billing_check(c: Conversation) -> Plan:
    order = need_order(c, "I'll look up the order's payments and refunds.")
    if not isinstance(order, dict):
        return order or Answer("I could not tell which order to check.")
    oid = order["order_id"]
    payments = order.get("payments") or []
    total, captured = dec(order.get("total")), dec(order.get("captured_amount"))
    refunded = dec(order.get("refunded_amount"))
    due = max(captured - total - refunded, dec(0))
    listing = json.dumps([(p.get("reference"), p.get("amount")) for p in payments])
    if due > 0:
        return Answer(
            f"Billing on order {oid}: total {total}, captured {captured} in {len(payments)} "
            f"payments {listing}, refunded {refunded}: a duplicate charge.\n"
            f"Due back: {due:.2f}\n"
            "For the customer: You were charged twice for this order; the duplicate will be "
            "refunded."
        )
    return Answer(
        f"Billing on order {oid}: total {total}, captured {captured} in {len(payments)} "
        f"payments {listing}, refunded {refunded}: no duplicate capture.\n"
        "Due back: 0.00\n"
        "For the customer: We checked your payment: the order was charged once; a second line "
        "on your statement is a pending authorization that disappears within a few days."
    )
