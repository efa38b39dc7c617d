"""Estimated cost of a model call from its token counts.

Prices are US dollars per million tokens (input, output). ``AGENTWEB_PRICES`` adds or
overrides entries: ``"my-model=0.5/1.5,other=1/2"``. A model with no known price has
no cost estimate (the page shows a dash rather than a wrong number).
"""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings

DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "demo": (0.0, 0.0),
    "scripted": (0.0, 0.0),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.6),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-sonnet-4": (3.0, 15.0),
    "deepseek-chat": (0.27, 1.1),
}


def _price(model: str) -> tuple[float, float] | None:
    prices = {**DEFAULT_PRICES, **getattr(settings, "AGENTWEB_PRICES", {})}
    name = model.split(":", 1)[-1]
    if name in prices:
        return prices[name]
    # Dated or suffixed names ("gpt-4o-2024-08-06") take the longest known prefix.
    matches = [known for known in prices if name.startswith(known)]
    return prices[max(matches, key=len)] if matches else None


def cost_usd(model: str, tokens: Mapping[str, int]) -> float | None:
    price = _price(model)
    if price is None:
        return None
    return round(
        (int(tokens.get("input", 0)) * price[0] + int(tokens.get("output", 0)) * price[1])
        / 1_000_000,
        6,
    )
