"""The project's structure stays as docs/architecture.md draws it: no import circle among
the modules of agentweb/ and tools/, counting every import (top level, under
TYPE_CHECKING, inside a function); at most ten import statements of project modules
stand anywhere but at a module's top level (inside functions, and also under
TYPE_CHECKING, in a try or an if), each inside a function and with a comment saying why;
no module over 800 lines, the loop under 450. (tests/runtime/test_import_rules.py holds
the runtime's own rules.)"""

from __future__ import annotations

from pathlib import Path

from tests.project import import_graph as g

MAX_NESTED = 10


def test_no_module_of_the_project_takes_part_in_an_import_circle():
    imports = g.project_imports()
    assert len(imports) > 1000  # the check saw the project
    assert g.circles(g.graph(imports)) == []


def test_at_most_ten_imports_of_project_modules_below_the_top_level():
    nested = g.nested_imports(g.project_imports())
    where = sorted(f"{path.relative_to(g.ROOT)}:{line}" for path, line in nested)
    assert len(nested) <= MAX_NESTED, where


def test_an_import_below_the_top_level_is_in_a_function_and_says_why():
    unexplained = [
        f"{path.relative_to(g.ROOT)}:{line}"
        for (path, line), imps in g.nested_imports(g.project_imports()).items()
        if not all(i.explained and i.in_function for i in imps)
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
    nested = g.nested_imports(imports)
    assert sorted((imp.source, imp.lineno) for imps in nested.values() for imp in imps) == [
        ("app.b", 3),
        ("app.c", 2),
        ("app.sub.d", 3),
    ]
    said = {
        imp.source: (imp.in_function, imp.explained) for imps in nested.values() for imp in imps
    }
    assert said == {"app.b": (False, False), "app.c": (True, False), "app.sub.d": (True, True)}
    assert g.circles({"a": {"b"}, "b": set()}) == []
