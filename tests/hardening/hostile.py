"""Hostile values for the fuzz tests and the fuzz benchmark: what an attacker sends."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

NUL = "a\x00b"
SURROGATE = "x\ud800y"
DEEP = "[" * 1000 + "]" * 1000
DEEP_OBJECT = '{"a":' * 1000 + "1" + "}" * 1000

# JSON texts no valid document parser should store (they are sent raw).
RAW_VALUES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "1" * 5000,
    "123456789012345678901234567890",
    '"\\u0000"',
    '"\\ud800"',
    '"\\udfff tail"',
    DEEP,
    DEEP_OBJECT,
    "[" * 100_000,
]

# What a page form's JSON field (an agent profile's allowed_tools, risk_overrides,
# approval_policies, delegates) is sent as text: too deep, lone surrogates (JSON-escaped,
# so the raw-text check at the edge sees ASCII), the same in list items, object values
# and keys, numbers JSON cannot store, shapes the field does not take, broken JSON.
DEEPER = "[" * 50_000 + "]" * 50_000
JSON_FIELD_TEXTS = [
    DEEP,
    DEEP_OBJECT,
    DEEPER,
    '"\\ud800"',
    '["\\ud800"]',
    '["get_order", "\\udfff"]',
    '{"get_order": "\\ud800"}',
    '{"\\ud800": "low"}',
    '{"issue_refund": {"argument": "\\ud800", "at_least": 20}}',
    '["a\\u0000b"]',
    '{"get_order": "a\\u0000"}',
    "NaN",
    "[Infinity]",
    '{"issue_refund": {"argument": "amount", "at_least": NaN}}',
    '{"issue_refund": {"argument": "amount", "at_least": 1e999}}',
    "[" + "1" * 5000 + "]",
    '{"get_order": [[["low"]]]}',
    '[["get_order"]]',
    '[{"name": "get_order"}]',
    "[1, 2]",
    "{}",
    "[]",
    '"get_order"',
    "42",
    "true",
    "not json",
    "{",
]
#: Whole numbers as text that are not: digits of other scripts, exponents, signs, huge.
NUMBER_TEXTS = ["²", "٣", "¹²", "1e3", "-1", "0", "1.5", "99999999999999999999", " 7 ", "NaN"]
NUMBER_TEXTS += ["", "0x10", "７"]

odd_ids = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(
        ["-1", "0", "abc", "²", "٣", "1e999", "0x10", " 1", "1.5", "99999999999999999999999"]
    ),
)

odd_text = st.one_of(
    st.sampled_from(
        [NUL, SURROGATE, "\x00", "\ud800", "", " ", "9999-12-31", "0000-00-00", "²", "NaN"]
    ),
    st.text(alphabet=st.characters(codec=None, categories=None), max_size=30),
    st.text(max_size=10).map(lambda s: s + "\x00"),
)


def raw(text: str) -> Any:
    """A marker for a JSON fragment that is inserted verbatim into a body."""
    return _Raw(text)


class _Raw:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"raw({self.text[:30]!r})"


hostile_scalar = st.one_of(
    st.sampled_from(RAW_VALUES).map(raw),
    odd_text,
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)

hostile_json = st.recursive(
    hostile_scalar,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(odd_text, children, max_size=4),
    ),
    max_leaves=12,
)


def dumps(value: Any) -> str:
    """JSON with the raw fragments, NaN/Infinity and surrogates kept as an attacker sends
    them (``ensure_ascii`` keeps lone surrogates as ``\\ud800`` escapes)."""
    if isinstance(value, _Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{dumps(str(k))}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value, allow_nan=True, ensure_ascii=True)
