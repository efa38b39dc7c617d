"""The runs app knows tickets, not the demo shop (DESIGN §11)."""

from __future__ import annotations

import ast
from pathlib import Path

RUNS = Path(__file__).resolve().parents[2] / "agentweb" / "runs"


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if node.level == 0 else f"agentweb.{node.module}"
            names += [base] + [f"{base}.{a.name}" for a in node.names]
    return names


def test_nothing_in_runs_imports_the_shop() -> None:
    files = [p for p in RUNS.rglob("*.py") if "migrations" not in p.parts]
    assert len(files) > 20  # the check saw the app
    found = [
        f"{p.relative_to(RUNS)}: {name}"
        for p in files
        for name in _imports(p)
        if name == "agentweb.shop" or name.startswith("agentweb.shop.")
    ]
    assert found == []


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("def f():\n    from agentweb.shop.models import Order\n")
    assert "agentweb.shop.models" in _imports(sample)
