"""The README's configuration table lists every environment variable the code reads."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READS = re.compile(
    r"""(?:env_(?:str|int|bool|list)|os\.environ\.get|os\.getenv|environ\.get|env\.get)"""
    r"""\(\s*["']([A-Z][A-Z0-9_]+)["']|os\.environ\[\s*["']([A-Z][A-Z0-9_]+)["']\s*\]"""
)
NOT_OURS = {"DJANGO_SETTINGS_MODULE"}  # Django's own


def variables_read() -> set[str]:
    found: set[str] = set()
    for folder in ("agentweb", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for match in READS.finditer(path.read_text()):
                found.add(match.group(1) or match.group(2))
    return found - NOT_OURS


def documented() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
            names.update(re.findall(r"`(OTEL_[A-Z0-9_]+)`", line))
    return names


def test_the_scan_finds_the_variables_it_should():
    assert {"DATABASE_URL", "DB_CONN_MAX_AGE", "AGENTWEB_TOOL_THREADS"} <= variables_read()


def test_every_variable_the_code_reads_is_in_the_readme_table():
    missing = sorted(variables_read() - documented())
    assert missing == [], f"add to the README configuration table: {missing}"
