"""The project's import graph, read from the source (no module is imported): every
module of agentweb/ and tools/ and each import of another of them, wherever it stands
(top level, under TYPE_CHECKING, inside a function). Used by test_import_rules and
runnable by hand for the figures:

    .venv/bin/python -m tests.project.import_graph
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentweb", "tools")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported project module, dotted
    path: Path
    lineno: int
    in_function: bool
    nested: bool  # not at the module's top level: in a function, an if, a try, a class
    explained: bool  # a comment on the line or on the line above


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every project module by dotted name (migrations left out: Django loads them by
    name and they import nothing of the project but their app's earlier migrations)."""
    files: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            files[module_name(path, root)] = path
    return files


def _resolve(name: str, modules: set[str]) -> str | None:
    """The project module that importing ``name`` loads last: the longest prefix of it
    that is a module (``agentweb.runs.models.Run`` -> ``agentweb.runs.models``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _imports_of(module: str, path: Path, modules: set[str]) -> list[Import]:
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    in_function = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for sub in ast.walk(node)
    }
    top_level = {id(node) for node in tree.body}
    is_package = path.name == "__init__.py"
    found: list[Import] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                # a package's own "." is itself; a module's "." is its package
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # "from a.b import c": c may be a module (a.b.c) or a name in a.b
            names = [f"{prefix}.{a.name}" for a in node.names if a.name != "*"] or [prefix]
        else:
            continue
        here = lines[node.lineno - 1]
        before = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        explained = "#" in here or before.startswith("#")
        for name in names:
            target = _resolve(name, modules)
            if target and target != module:
                found.append(
                    Import(
                        module,
                        target,
                        path,
                        node.lineno,
                        in_function=id(node) in in_function,
                        nested=id(node) not in top_level,
                        explained=explained,
                    )
                )
    return found


def project_imports(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    files = project_files(root, packages)
    modules = set(files)
    return [imp for module, path in files.items() for imp in _imports_of(module, path, modules)]


def graph(imports: list[Import]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for imp in imports:
        edges.setdefault(imp.source, set()).add(imp.target)
    return edges


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return sorted(out)


def nested_imports(imports: list[Import]) -> dict[tuple[Path, int], list[Import]]:
    """The import statements of project modules that are not at a module's top level
    (inside a function, and also under ``if TYPE_CHECKING:``, in a ``try`` or a class),
    by (file, line): ``from a import b, c`` is one statement, however many it names."""
    found: dict[tuple[Path, int], list[Import]] = {}
    for imp in imports:
        if imp.nested:
            found.setdefault((imp.path, imp.lineno), []).append(imp)
    return found


def long_modules(limit: int = 800, root: Path = ROOT) -> dict[str, int]:
    sizes = {m: len(p.read_text().splitlines()) for m, p in project_files(root).items()}
    return {m: n for m, n in sorted(sizes.items()) if n > limit}


def main() -> None:
    imports = project_imports()
    found = circles(graph(imports))
    inside = nested_imports(imports)
    print(f"modules: {len(project_files())}, imports of project modules: {len(imports)}")
    print(f"circles of more than one module: {len(found)}")
    for c in found:
        print(f"  {len(c)}: {', '.join(c)}")
    print(f"import statements of project modules not at top level: {len(inside)}")
    for (path, lineno), imps in sorted(inside.items()):
        mark = "" if all(i.explained for i in imps) else "  (no comment)"
        mark += "" if all(i.in_function for i in imps) else "  (not in a function)"
        names = ", ".join(i.target for i in imps)
        print(f"  {path.relative_to(ROOT)}:{lineno} {names}{mark}")
    print(f"modules over 800 lines: {long_modules() or 'none'}")


if __name__ == "__main__":
    main()
