"""Anything else: the knowledge base answers; a draft reply for a person, nothing changed."""

from __future__ import annotations

from typing import Any

from .conversation import ORDER_ID, Act, Conversation, Plan
from .helpers import (
    finish,
    letter,
    sentences,
)


def plan_general(c: Conversation) -> Plan:
    if not c.tried("search_kb"):
        calls: list[tuple[str, dict[str, Any], str]] = []
        order_id = c.find(ORDER_ID)
        if order_id and not c.tried("get_order"):
            calls.append(("get_order", {"order_id": order_id}, "look up the order"))
        elif c.customer_id and not c.tried("get_customer"):
            calls.append(("get_customer", {"customer_id": c.customer_id}, "who they are"))
        query = f"{c.subject} {c.body}".strip()[:200]
        calls.append(("search_kb", {"query": query}, "find the relevant article"))
        return Act(calls, "A general question. I'll look for the answer in the knowledge base.")
    results = (c.ok("search_kb") or {}).get("results") or []
    if not results:
        return finish(
            c,
            "The knowledge base has nothing on this question; it needs a person. No changes "
            "were made.",
        )
    top = results[0]
    draft = letter(c, f"Thanks for reaching out. {sentences(top.get('body') or top['excerpt'])}")
    return finish(
        c,
        f'General question; the best match is the article "{top["title"]}" ({top["slug"]}). '
        "Nothing needed changing. A suggested reply for you to review (not sent):\n\n" + draft,
    )
