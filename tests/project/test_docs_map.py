"""docs/architecture.md stays a true map: every file it names exists (paths written from
the repository's root, or from agentweb/ for the apps' modules)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"`([A-Za-z_][\w./-]*/[\w.-]+\.(?:py|js|html|md|jsonl))`")
TEST = re.compile(r"`(test_\w+\.py)`")  # a test file named alone: it is somewhere in tests/


def named_paths(text: str) -> list[str]:
    return sorted(set(PATH.findall(text)))


def missing(paths: list[str]) -> list[str]:
    return [p for p in paths if not (ROOT / p).exists() and not (ROOT / "agentweb" / p).exists()]


def test_every_file_the_architecture_map_names_exists():
    paths = named_paths(DOC.read_text())
    assert len(paths) > 60  # the check saw the map
    assert missing(paths) == []


def test_every_test_file_it_names_alone_exists():
    names = sorted(set(TEST.findall(DOC.read_text())))
    assert len(names) > 10
    assert [n for n in names if not list((ROOT / "tests").rglob(n))] == []


def test_the_check_finds_a_file_that_is_not_there():
    paths = named_paths("`runs/engine.py`, `tests/runs/test_engine.py`, `runs/nowhere.py`")
    assert missing(paths) == ["runs/nowhere.py"]
