"""The package's folders import one way: what turns results into numbers and verdicts (bench.analysis) and what a
run is planned from (bench.plan) below the claims, the claims below the profiles and the engine that plan and run
them, the report (rendering) above all of them. Every import counts, one inside a function too: a circle hidden in a
function is still a circle.

The graph is read from the source (ast), as /work/shared/tools/import_circles.py reads it: a module's imports folded
onto bench's top-level folders and modules (bench.claims.decode -> bench.claims)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bench"
# bottom to top: a folder here imports none of the folders after it
LAYERS = ("bench.analysis", "bench.plan", "bench.claims", "bench.profiles", "bench.engine", "bench.report")


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Each module of bench -> the modules of bench it imports, at any depth of its body."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != m and not m.startswith(t + ".") and t != "bench":
                    edges[m].add(t)
    return edges


def _folder(module: str) -> str:
    return ".".join(module.split(".")[:2])


def folders(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {_folder(m): set() for m in edges}
    for m, targets in edges.items():
        out[_folder(m)] |= {_folder(t) for t in targets if _folder(t) != _folder(m)}
    return out


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_layers_import_only_downwards():
    edges = imports()
    upward = sorted(f"{m} -> {t}" for m, targets in edges.items() for t in targets
                    if _folder(m) in LAYERS and _folder(t) in LAYERS
                    and LAYERS.index(_folder(t)) > LAYERS.index(_folder(m)))
    assert upward == [], "imports that run up a layer:\n" + "\n".join(upward)


def test_no_circle_of_folders_reaches_the_layers():
    tangled = [c for c in circles(folders(imports())) if c & set(LAYERS)]
    assert tangled == [], f"folders that import each other: {tangled}"


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
