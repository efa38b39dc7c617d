"""The runtime is a library: it imports nothing of the application (Django apps, the
tool modules) and speaks of tools, calls and messages only (README, Architecture)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "agentweb" / "runtime"
FORBIDDEN = ("django", "tools", "agentweb.runs", "agentweb.shop", "agentweb.web",
             "agentweb.accounts", "channels", "channels_redis", "celery")  # fmt: skip
DOMAIN_WORDS = re.compile(r"refund|carrier|parcel|shipment|order_id|customer|ticket", re.I)


def _forbidden(module: str) -> bool:
    return module.startswith("django_") or any(
        module == f or module.startswith(f + ".") for f in FORBIDDEN
    )


def test_importing_every_runtime_module_loads_nothing_of_the_application():
    code = (
        "import importlib, pkgutil, sys\n"
        "import agentweb.runtime\n"
        "for info in pkgutil.iter_modules(agentweb.runtime.__path__):\n"
        "    importlib.import_module('agentweb.runtime.' + info.name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = out.stdout.split()
    assert "agentweb.runtime.loop" in loaded  # the check itself saw the runtime
    assert [m for m in loaded if _forbidden(m)] == []


def test_no_runtime_file_imports_the_application():
    offenders = []
    for path in sorted(RUNTIME.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level > 1:  # from ..runs import x
                    names = ["agentweb." + (node.module or "")]
                elif node.level == 0 and node.module:
                    names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if _forbidden(n)]
    assert offenders == []


def test_the_rule_check_catches_an_application_import(tmp_path):
    source = (
        "from agentweb.shop.models import Order\nfrom ..runs import models\n"
        "from django_htmx.http import HttpResponseClientRedirect\nfrom .messages import Message\n"
    )
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            name = node.module if node.level == 0 else "agentweb." + (node.module or "")
            found.append(_forbidden(name or ""))
    assert found == [True, True, True, False]
    assert not _forbidden("toolsy") and not _forbidden("agentweb.runtime.tools")


def _code_lines(path: Path) -> list[str]:
    """Lines that are code, not comments or docstrings."""
    tree = ast.parse(path.read_text())
    doc_lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                first = body[0]
                doc_lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = path.read_text().splitlines()
    return [
        line
        for n, line in enumerate(lines, start=1)
        if n not in doc_lines and not line.strip().startswith("#")
    ]


def test_the_runtime_names_no_domain():
    found = [
        f"{path.name}: {line.strip()}"
        for path in sorted(RUNTIME.glob("*.py"))
        for line in _code_lines(path)
        if DOMAIN_WORDS.search(line.split("#")[0])
    ]
    assert found == []


PACKAGE = "agentweb.runtime."


def _runtime_imports() -> dict[str, list[tuple[str, ast.stmt, bool]]]:
    """Each runtime module's imports of other runtime modules: (module, node, inside a
    function). Every import counts: top level, under TYPE_CHECKING, inside a function."""
    modules = {p.stem for p in RUNTIME.glob("*.py")}
    found: dict[str, list[tuple[str, ast.stmt, bool]]] = {}
    for path in sorted(RUNTIME.glob("*.py")):
        tree = ast.parse(path.read_text())
        in_function = {
            id(sub)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            for sub in ast.walk(node)
        }
        edges: list[tuple[str, ast.stmt, bool]] = []
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                targets = (
                    [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                )
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "agentweb.runtime."
            ):
                targets = [(node.module or "").split(".")[2]]
            elif isinstance(node, ast.Import):
                targets = [
                    a.name.split(".")[2]
                    for a in node.names
                    if a.name.startswith("agentweb.runtime.")
                ]
            edges += [(t, node, id(node) in in_function) for t in targets if t in modules]
        found[path.stem] = [e for e in edges if e[0] != path.stem]
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_runtime_module_takes_part_in_an_import_circle():
    graph = {m: {t for t, _, _ in edges} for m, edges in _runtime_imports().items()}
    assert _circles(graph) == []


def test_the_circle_check_finds_a_circle_through_any_kind_of_import():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_an_import_inside_a_runtime_function_says_why():
    unexplained = []
    for module, edges in _runtime_imports().items():
        lines = (RUNTIME / f"{module}.py").read_text().splitlines()
        for target, node, in_function in edges:
            here, before = lines[node.lineno - 1], lines[node.lineno - 2].strip()
            if in_function and "#" not in here and not before.startswith("#"):
                unexplained.append(f"{module}.py:{node.lineno} imports {target}")
    assert unexplained == []
