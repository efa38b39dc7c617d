"""Change the delivery address: with approval before shipping, else a carrier redirect."""

from __future__ import annotations

from .conversation import Answer, Conversation, Plan
from .helpers import (
    finish,
    letter,
    need_order,
    once,
    reply_once,
)


def plan_address(c: Conversation) -> Plan:
    order = need_order(
        c, "The customer wants the parcel to go to another address. First, has it shipped?"
    )
    if not isinstance(order, dict):
        return order or Answer("I could not tell which order this is; ask for the number.")
    oid, status = order["order_id"], order.get("status")
    address = c.new_address
    if address is None:
        plan = reply_once(
            c,
            letter(c, f"I can change the delivery address of order {oid} for you. Please "
                    "reply with the full new address: street and number, postal code, city "
                    "and country."),
            "The ticket has no complete new address, so I'll ask for it instead of guessing.",
        )  # fmt: skip
        return plan or finish(c, f"Waiting for the customer's new address for {oid}.")
    if order.get("can_cancel_or_change_address"):
        plan = once(
            c,
            "update_shipping_address",
            {"order_id": oid, "address": address},
            f"change the address of {oid}",
            f"{oid} is {status} and hasn't shipped, so I can change the address to "
            f'"{address}". This needs approval.',
        )
        if plan:
            return plan
        if "update_shipping_address" in c.unavailable:
            return finish(c, f"{oid} has not shipped; it can still go to {address}.")
        changed = c.ok("update_shipping_address")
        if changed is not None:
            plan = reply_once(
                c,
                letter(c, f"Done: order {oid} will ship to {changed['new_address']}. You'll "
                        "get the tracking number by email when it leaves our warehouse."),
                "Address changed. I'll confirm it to the customer.",
            )  # fmt: skip
            return plan or finish(c, f"Order {oid} now ships to the new address.")
        reason = c.rejected("update_shipping_address")
        if reason is not None:
            return finish(
                c,
                f"The address change on {oid} was rejected ({reason}); the order keeps its "
                "address. Check the new address with the customer.",
            )
        return finish(
            c, f"The shop refused the address change: {c.failed('update_shipping_address')}"
        )
    shipments = order.get("shipments") or []
    if status == "shipped" and shipments:
        tracking = shipments[-1]["tracking_number"]
        plan = once(
            c,
            "escalate_to_carrier",
            {
                "tracking_number": tracking,
                "reason": f"Customer asks to redirect the parcel to: {address}",
            },
            "ask the carrier to redirect",
            f"{oid} has already shipped ({tracking}), so the order's address can't be "
            "changed. Our policy is to ask the carrier for a redirect instead.",
        )
        if plan:
            return plan
        trace = c.ok("escalate_to_carrier")
        redirect = (
            f"We've asked {trace.get('carrier')} to redirect it to {address} (reference "
            f"{trace.get('escalation_id')}). Redirects usually add a day or two and "
            "aren't guaranteed; we'll let you know what the carrier says."
            if trace
            else "Please contact us again if you'd like us to ask the carrier to redirect it."
        )
        plan = reply_once(
            c,
            letter(c, f"Your order {oid} had already left our warehouse, so I couldn't "
                    f"change its address directly. {redirect}"),
            "I'll explain the redirect to the customer.",
        )  # fmt: skip
        return plan or finish(
            c, f"{oid} had shipped; the address could not be changed, a redirect was requested."
            if trace else f"{oid} had shipped; the address could not be changed."
        )  # fmt: skip
    plan = reply_once(
        c,
        letter(c, f"Your order {oid} is {status}, so its address can no longer be changed. "
                "If anything went wrong with the delivery, reply and we'll help."),
        f"{oid} is {status}; there's nothing to redirect. I'll explain.",
    )  # fmt: skip
    return plan or finish(c, f"{oid} is {status}; the address could not be changed.")
