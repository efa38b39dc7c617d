"""A counter keeps the count of each tool spec it has seen (specs are made once per tool
and offered at every model call)."""

from __future__ import annotations

import dataclasses

import pytest

from agentweb.runtime.gateway import ToolSpec
from agentweb.runtime.tokens import EstimateCounter


class Counting(EstimateCounter):
    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def count_text(self, text: str) -> int:
        self.texts += 1
        return super().count_text(text)


SPECS = [
    ToolSpec("get_order", "Look an order up.", {"type": "object", "properties": {"id": {}}}),
    ToolSpec("search_kb", "Search the help articles.", {"type": "object"}),
]


def test_the_same_specs_are_counted_once_and_the_total_is_unchanged() -> None:
    counter, fresh = Counting(), EstimateCounter()
    first = counter.count_tools(SPECS)
    seen = counter.texts
    assert first == sum(fresh.count_tools([s]) for s in SPECS) > 0
    assert counter.count_tools(SPECS) == first and counter.texts == seen  # no text counted
    assert counter.count_tools(SPECS[1:]) == fresh.count_tools(SPECS[1:])


def test_an_equal_looking_new_spec_is_counted_as_itself() -> None:
    counter = Counting()
    counter.count_tools(SPECS)
    longer = dataclasses.replace(SPECS[0], description="Look an order up. " * 20)
    assert counter.count_tools([longer]) == EstimateCounter().count_tools([longer])
    assert counter.count_tools([longer]) > counter.count_tools(SPECS[:1])


def test_a_missing_tiktoken_is_looked_for_once_per_model(monkeypatch) -> None:
    """Python does not remember a failed import: asked at every run, the path was searched
    for tiktoken twice per run on an installation without it."""
    import builtins

    from agentweb.runtime import tokens

    tokens.tiktoken_counter.cache_clear()
    looked: list[str] = []
    real_import = builtins.__import__

    def import_(name: str, *args: object, **kwargs: object) -> object:
        if name == "tiktoken":
            looked.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", import_)
    first = tokens.default_counter("openai:gpt-4o")
    for _ in range(3):
        assert type(tokens.default_counter("openai:gpt-4o")) is type(first)
    assert looked == ["tiktoken"]
    tokens.default_counter("openai:gpt-4.1")
    assert len(looked) == 2  # another model is asked for once


def test_the_estimate_is_one_counter_whose_tool_counts_serve_every_run():
    """Runs without tiktoken (another provider, an unknown model) share one estimate, so a
    tool's count is made once per process, not once per run."""
    from agentweb.runtime import tokens
    from agentweb.runtime.gateway import ToolSpec

    first, second = tokens.default_counter("anthropic:x"), tokens.default_counter(None)
    assert first is second
    assert isinstance(first, tokens.EstimateCounter)
    spec = ToolSpec("lookup", "Find an order.", {"type": "object", "properties": {}})
    counted: list[object] = []
    real = type(first)._count_tool

    def counting(self: object, t: ToolSpec) -> int:
        counted.append(t)
        return real(self, t)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(first), "_count_tool", counting)
        totals = {tokens.default_counter(None).count_tools([spec]) for _ in range(3)}
    assert len(totals) == 1 and totals.pop() > 0
    assert counted == [spec]  # a new spec: counted at the first run, kept for the others
