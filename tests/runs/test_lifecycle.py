"""A run's status changes in one place (``agentweb/runs/lifecycle.py``): no other module of
the application writes a ``Run.Status`` (in an UPDATE, a create or an assignment). The
behaviour of each transition is tested where it is used (engine, cancel, delegation,
approvals, the sweep); this keeps the fields that belong together from drifting apart
again."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "agentweb" / "runs" / "lifecycle.py"
WRITES = {"update", "create", "get_or_create", "update_or_create"}


def _writes_a_run_status(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in WRITES:
                for kw in node.keywords:
                    if kw.arg == "status" and ast.unparse(kw.value).startswith("Run.Status."):
                        lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = ast.unparse(node.value) if node.value is not None else ""
            for target in targets:
                named = [t for t in ast.walk(target) if isinstance(t, ast.Attribute)]
                if any(t.attr == "status" for t in named) and "Run.Status." in value:
                    lines.append(node.lineno)
    return lines


def test_only_the_life_cycle_writes_a_runs_status() -> None:
    found = []
    for base in (ROOT / "agentweb", ROOT / "tools"):
        for path in sorted(base.rglob("*.py")):
            if path == HOME or "migrations" in path.parts:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{n}"
                for n in _writes_a_run_status(ast.parse(path.read_text()))
            ]
    assert found == []
    assert _writes_a_run_status(ast.parse(HOME.read_text()))  # the check sees the writes


def test_the_check_catches_each_kind_of_write() -> None:
    source = (
        "Run.objects.filter(pk=1).update(status=Run.Status.QUEUED)\n"
        "Run.objects.create(task='x', status=Run.Status.RUNNING)\n"
        "run.status = Run.Status.CANCELLED\n"
        "run.status, run.reason = Run.Status.FAILED, 'x'\n"
        "Run.objects.filter(status=Run.Status.QUEUED).count()\n"  # a read
        "Approval.objects.update(status=Approval.Status.EXPIRED)\n"  # another model
    )
    assert sorted(_writes_a_run_status(ast.parse(source))) == [1, 2, 3, 4]
