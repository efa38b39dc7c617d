"""docs/runtime-contract.md stays a true reference: its AgentConfig table has every field
with the default config.py gives it, and every module it is organised by exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from agentweb.runtime.config import AgentConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime-contract.md"
ROW = re.compile(r"^\| `(\w+)` \| ([^|]+) \|", re.M)


def _table() -> dict[str, str]:
    return {name: default.strip() for name, default in ROW.findall(DOC.read_text())}


def _default(name: str) -> str:
    field = AgentConfig.model_fields[name]
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory else field.default
    return str(value)


def test_the_config_table_has_every_field_with_its_default():
    table = _table()
    assert sorted(table) == sorted(AgentConfig.model_fields)
    assert {n: table[n] for n in table} == {n: _default(n) for n in table}


def test_every_module_it_names_exists():
    modules = re.findall(r"`agentweb\.runtime\.(\w+)`", DOC.read_text())
    assert len(set(modules)) > 10
    for name in sorted(set(modules)):
        importlib.import_module(f"agentweb.runtime.{name}")
