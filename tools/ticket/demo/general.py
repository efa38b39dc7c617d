"""Anything else: the knowledge base answers; a draft reply for a person, nothing changed."""

from __future__ import annotations

import re
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
        query = c.question[:200]
        calls.append(("search_kb", {"query": query}, "find the relevant article"))
        return Act(calls, "A general question. I'll look for the answer in the knowledge base.")
    results = (c.ok("search_kb") or {}).get("results") or []
    scored = [(relevance(c.question, r), -i, r) for i, r in enumerate(results)]
    relevant = [r for score, _, r in sorted(scored, key=lambda x: x[:2], reverse=True) if score]
    if not relevant:
        found = (
            f' (its nearest article, "{results[0]["title"]}", is about something else)'
            if results
            else ""
        )
        return finish(
            c,
            "The knowledge base has no answer to this question"
            + found
            + "; it needs a person. No changes were made.",
        )
    top = relevant[0]
    draft = letter(c, f"Thanks for reaching out. {sentences(top.get('body') or top['excerpt'])}")
    return finish(
        c,
        f'General question; the best match is the article "{top["title"]}" ({top["slug"]}). '
        "Nothing needed changing. A suggested reply for you to review (not sent):\n\n" + draft,
    )


#: Words that tell nothing about what a question is about (every ticket has them).
_COMMON = frozenset(
    [
        "order",
        "orders",
        "item",
        "items",
        "please",
        "thanks",
        "thank",
        "hello",
        "there",
        "with",
        "what",
        "when",
        "where",
        "which",
        "would",
        "could",
        "should",
        "about",
        "from",
        "have",
        "that",
        "this",
        "your",
        "mine",
        "need",
        "help",
        "want",
        "like",
        "just",
        "know",
        "does",
        "will",
        "they",
        "them",
        "their",
        "been",
        "into",
        "some",
        "more",
        "also",
        "than",
        "only",
        "very",
        "here",
        "tell",
    ]
)


def _words(text: str) -> set[str]:
    """The words of ``text`` that carry meaning (four letters or more, not ``_COMMON``)."""
    return {w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _COMMON}


def _alike(a: str, b: str) -> int:
    """3 for the same word, 2 for one word that begins the other ("ship", "shipping")."""
    if a == b:
        return 3
    return 2 if a.startswith(b) or b.startswith(a) else 0


def relevance(question: str, article: dict[str, Any]) -> int:
    """How well a knowledge-base article matches ``question``: its title's words count
    most, then its excerpt's; 0 when they share no word that carries meaning (the search
    matches any word, "order" too, so its best match may be about something else)."""
    asked = _words(question)
    title = _words(str(article.get("title", "")))
    excerpt = _words(str(article.get("excerpt", "")))
    score = sum(max((_alike(q, t) for t in title), default=0) for q in asked)
    score += sum(1 for q in asked if any(_alike(q, e) for e in excerpt))
    return score
