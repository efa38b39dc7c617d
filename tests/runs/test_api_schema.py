"""The rules the OpenAPI document states for every request, checked against the server's
own: white space as str.strip() sees it, NUL-free text, patterns a validator can use."""

from __future__ import annotations

import re
from typing import Any

import jsonschema_rs
import pytest
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from agentweb.runs.api_input import BLANK, NON_BLANK, TEXT, WHITESPACE, model_pattern
from tests.runs.test_api import bearer


def test_the_white_space_class_is_what_strip_removes() -> None:
    spaces = {chr(c) for c in range(0x110000) if chr(c).isspace()}
    found = {chr(c) for c in range(0x110000) if re.fullmatch(f"[{WHITESPACE}]", chr(c))}
    assert found == spaces


@given(st.text(alphabet=st.sampled_from(" \t\n\x0b\x1c\x85\xa0\u2028\u3000\ufeffa\x00é")))
def test_non_blank_is_what_the_server_refuses_as_blank(text: str) -> None:
    assert bool(re.search(NON_BLANK, text)) == (bool(text.strip()) and "\x00" not in text)
    assert bool(re.search(BLANK, text)) == (not text.strip())
    assert bool(re.search(TEXT, text)) == ("\x00" not in text)


@pytest.mark.parametrize(
    ("spec", "ok"),
    [("demo", True), (" demo ", True), ("", True), ("  ", True), ("openai:gpt-4o", True),
     ("anthropic: claude", True), ("openai:", False), ("openai: ", False), ("demo2", False),
     ("x:y", False), ("openai :m", False)],
)  # fmt: skip
def test_the_model_pattern_reads_a_spec_as_the_runtime_does(spec: str, ok: bool) -> None:
    assert bool(re.search(model_pattern(), spec)) == ok


def _patterns(value: Any) -> list[str]:
    if isinstance(value, dict):
        own = [value["pattern"]] if isinstance(value.get("pattern"), str) else []
        return own + [p for v in value.values() for p in _patterns(v)]
    if isinstance(value, list):
        return [p for v in value for p in _patterns(v)]
    return []


def test_every_pattern_in_the_document_is_usable_and_refuses_nul(people) -> None:
    """JSON Schema's validators (here the Rust one schemathesis uses) can compile each
    pattern, and none lets a NUL character through (the edge refuses it everywhere)."""
    for doc in (
        Client().get("/api/openapi.json").json(),
        bearer(people["admin"]).get("/api/openapi.json").json(),
    ):
        patterns = set(_patterns(doc))
        assert TEXT in patterns and NON_BLANK in patterns
        for pattern in patterns:
            validator = jsonschema_rs.validator_for({"type": "string", "pattern": pattern})
            assert not validator.is_valid("ok\x00"), pattern
            assert not validator.is_valid("\x00"), pattern


def test_every_operation_lists_the_errors_any_request_can_get(people) -> None:
    doc = bearer(people["admin"]).get("/api/openapi.json").json()
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            wanted = {"400", "401", "403", "503"} | (
                {"413", "415"} if "requestBody" in operation else set()
            )
            assert wanted <= set(operation["responses"]), (method, path)
            for code in wanted:
                schema = operation["responses"][code]["content"]["application/json"]["schema"]
                assert schema["$ref"].endswith(("/Error", "/FieldError")), (method, path, code)
