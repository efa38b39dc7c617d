"""Is it in stock: check the inventory and the restock policy, answer."""

from __future__ import annotations

import re

from .conversation import Act, Conversation, Plan
from .helpers import (
    finish,
    letter,
    reply_once,
)


def plan_stock(c: Conversation) -> Plan:
    sku = c.sku
    kb = ("search_kb", {"query": "out of stock restock backorder"}, "check restock policy")
    if sku is None:
        if not c.tried("search_kb"):
            return Act([kb], "The ticket doesn't give a SKU; I'll check the restock policy.")
        return finish(
            c,
            "The customer asks about stock but names no product code; ask which product "
            "(a link or SKU like KIT-0101). Policy: no backorders, back-in-stock emails.",
        )
    if not c.tried("check_inventory"):
        calls = [("check_inventory", {"sku": sku}, "check stock")]
        if not c.tried("search_kb"):
            calls.append(kb)
        return Act(calls, f"I'll check the stock of {sku} and our restock policy.")
    stock = c.ok("check_inventory")
    if stock is None:
        return finish(
            c,
            f"I could not check {sku}: {c.failed('check_inventory')}. Ask the customer for "
            "the product link.",
        )
    name, available = stock["name"], int(stock.get("available") or 0)
    wanted = 2 if re.search(r"\b(two|2|pair of)\b", c.text) else 1
    if available >= wanted:
        text = (
            f"Good news: the {name} ({sku}) is in stock right now, so you can order it on our "
            "site today. We don't hold stock for orders that aren't placed yet, so sooner is "
            "better."
        )
        headline = f"{sku} is in stock ({available} available)."
    elif available > 0:
        text = (
            f"We have only {available} of the {name} ({sku}) in stock at the moment, fewer "
            f"than the {wanted} you asked about."
        )
        headline = f"{sku}: only {available} available, the customer wants {wanted}."
    else:
        restock = stock.get("restock_date")
        when = (
            f"We expect new stock around {restock}."
            if restock
            else "We don't have a confirmed restock date yet."
        )
        text = (
            f"The {name} ({sku}) is sold out at the moment. {when} We don't take backorders, "
            "but you can sign up for a back-in-stock email on the product page and we'll "
            "tell you the moment it's available."
        )
        headline = f"{sku} is out of stock; restock {restock or 'date unknown'}."
    plan = reply_once(
        c,
        letter(c, text),
        f"{sku}: {available} available. I'll answer the customer.",
    )
    return plan or finish(c, headline)
