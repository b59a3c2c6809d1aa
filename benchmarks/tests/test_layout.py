"""The laboratory depends on the library, never the reverse, and its own modules import one another
in one direction only (no import cycle: a module can be run as a script or imported alone)."""
from __future__ import annotations

import ast
from pathlib import Path

import burtorch_bench

PACKAGE = Path(burtorch_bench.__file__).resolve().parent
LIBRARY = Path(__file__).resolve().parents[2] / "src" / "burtorch"


def _imports(path: Path, package: str) -> set[str]:
    """The modules `path` (module `package`.x, or the package itself for __init__) imports, by full name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            if node.module:
                found.add(".".join([*base, node.module]))
            if node.level:  # `from . import x`: x may be a module
                found.update(".".join([*base, *([node.module] if node.module else []), a.name]) for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = name if rel.name == "__init__" else name.rpartition(".")[0]
        graph[name] = _imports(path, package)
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := walk(d, [*path, d])):
                return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := walk(m, [m])):
            return found
    return None


def test_the_graph_reader_sees_a_cycle_when_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_laboratory_has_no_import_cycle():
    graph = _graph()
    assert "burtorch_bench.capacity" in graph and "burtorch_bench.step_builders" in graph["burtorch_bench.threads"]
    assert _cycle(graph) is None


def test_the_library_never_imports_the_laboratory():
    if not LIBRARY.is_dir():
        import pytest

        pytest.skip("not run from a checkout of the repository")
    offenders = [str(p) for p in LIBRARY.rglob("*.py")
                 if any(m.split(".")[0] == "burtorch_bench" for m in _imports(p, "burtorch"))]
    assert offenders == []
