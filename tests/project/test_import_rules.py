"""The project's structure stays as docs/architecture.md draws it: no import circle among
the modules of agentweb/ and tools/, counting every import (top level, under
TYPE_CHECKING, inside a function); at most ten import statements inside functions load
a project module, each with a comment saying why; no module over 800 lines, the loop
under 450. (tests/runtime/test_import_rules.py holds the runtime's own rules.)"""

from __future__ import annotations

from pathlib import Path

from tests.project import import_graph as g

MAX_INSIDE_FUNCTIONS = 10


def test_no_module_of_the_project_takes_part_in_an_import_circle():
    imports = g.project_imports()
    assert len(imports) > 1000  # the check saw the project
    assert g.circles(g.graph(imports)) == []


def test_at_most_ten_imports_of_project_modules_inside_functions():
    inside = g.inside_functions(g.project_imports())
    where = sorted(f"{path.relative_to(g.ROOT)}:{line}" for path, line in inside)
    assert len(inside) <= MAX_INSIDE_FUNCTIONS, where


def test_an_import_inside_a_function_says_why():
    unexplained = [
        f"{path.relative_to(g.ROOT)}:{line}"
        for (path, line), imps in g.inside_functions(g.project_imports()).items()
        if not all(i.explained for i in imps)
    ]
    assert unexplained == []


def test_no_module_is_over_800_lines_and_the_loop_is_under_450():
    assert g.long_modules(800) == {}
    loop = g.ROOT / "agentweb" / "runtime" / "loop.py"
    assert len(loop.read_text().splitlines()) < 450


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checks_see_a_circle_through_any_kind_of_import(tmp_path: Path):
    _write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/a.py": "from app import b\n",
            "app/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n"
            ),
            "app/c.py": "def f():\n    from .sub.d import x\n    return x\n",
            "app/sub/__init__.py": "",
            "app/sub/d.py": "def g():\n    # said why\n    import app.a\n\nx = 1\n",
            "app/e.py": "from app.a import thing\n",  # leads in, not part of it
        },
    )
    imports = g.project_imports(tmp_path, ("app",))
    assert g.circles(g.graph(imports)) == [["app.a", "app.b", "app.c", "app.sub.d"]]
    inside = g.inside_functions(imports)
    assert sorted(line for _, line in inside) == [2, 3]
    said = {imp.source: imp.explained for imps in inside.values() for imp in imps}
    assert said == {"app.c": False, "app.sub.d": True}
    assert g.circles({"a": {"b"}, "b": set()}) == []
