"""The library's modules import one way: core <- nn, optim, io, viz, data, program/oracle <- fl <- cli.

Read from the source with ast (no module is imported): every import statement counts, at the
top, inside functions and under TYPE_CHECKING alike, and so does ``late.module("name")``, the
library's own import-on-first-use. src/burtorch/bench (a laboratory, moving out of the package)
is not read.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "src" / "burtorch"

# Layer of a module by its first name under burtorch (anything not listed is the core). The
# package's __init__ (``import burtorch as bt``: the facade that hands out the layers below it)
# stands between them and fl, so fl and the command line may use it and nothing below may.
# ``python -m burtorch`` (__main__) runs the command line and stands above everything.
LAYERS = {
    **dict.fromkeys(("nn", "optim", "io", "viz", "data", "program", "oracle", "oracle_compiled"), 1),
    "fl": 3,
    "cli": 4,
    "__main__": 5,
}
FACADE = 2
LAYER_NAMES = {0: "core", 1: "nn/optim/io/viz/data/program/oracle", FACADE: "the package facade", 3: "fl", 4: "cli",
               5: "__main__"}


def module_files(pkg: Path = PKG) -> dict[str, Path]:
    """{dotted module name: file} for every .py of the package outside bench/."""
    out = {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg.parent).with_suffix("")
        parts = list(rel.parts)
        if len(parts) > 1 and parts[1] == "bench":
            continue
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the file imports (resolved relative imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        # the deepest module of the package that the dotted name names
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target:
            found.add(target)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in modules else base)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "module"
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "late" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            add(f"burtorch.{node.args[0].value}")
    found.discard(name)
    return found


# The native extension and the CPU probe that picks its build: modules of the core with no Python
# imports.
NATIVE = ("burtorch._core", "burtorch._cpu")


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    files = module_files(pkg)
    modules = set(files) | set(NATIVE)
    graph = {name: imports_of(name, path, modules) for name, path in files.items()}
    graph.update({name: set() for name in NATIVE})
    return graph


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], 0) if len(parts) > 1 else FACADE


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_graph_sees_the_package(graph):
    # the reader must find the modules and their imports, or every check below passes vacuously
    assert {"burtorch.optim.sgd", "burtorch.fl.federation", "burtorch.cli.main", "burtorch.nn.module"} <= set(graph)
    assert "burtorch.optim.methods" in graph["burtorch.fl.methods"]
    assert "burtorch.oracle_compiled" in graph["burtorch.oracle"]  # through late.module(...)
    assert "burtorch.fl.federation" in graph["burtorch.cli.fl"]  # an import inside a function
    assert not any(name.startswith("burtorch.bench") for name in graph)


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_only_the_command_line_imports_it(graph):
    offenders = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                       if (t == "burtorch.cli" or t.startswith("burtorch.cli.")) and layer(m) < layer(t))
    assert offenders == []


def test_layers_import_downwards(graph):
    offenders = sorted(f"{m} ({LAYER_NAMES[layer(m)]}) -> {t} ({LAYER_NAMES[layer(t)]})"
                       for m, targets in graph.items() for t in targets if layer(t) > layer(m))
    assert offenders == []


def test_the_checks_catch_a_cycle_and_an_upward_import(tmp_path):
    # a throwaway package with one cycle (through an import inside a function) and one import
    # from optim up into fl: the same functions must report both
    pkg = tmp_path / "burtorch"
    (pkg / "optim").mkdir(parents=True)
    (pkg / "fl").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "optim" / "__init__.py").write_text("")
    (pkg / "fl" / "__init__.py").write_text("")
    (pkg / "optim" / "a.py").write_text("def f():\n    from ..fl import b\n")
    (pkg / "fl" / "b.py").write_text("from ..optim.a import f\n")
    g = import_graph(pkg)
    assert g["burtorch.optim.a"] == {"burtorch.fl.b"}
    assert cycles(g) == [["burtorch.fl.b", "burtorch.optim.a"]]
    assert layer("burtorch.fl.b") > layer("burtorch.optim.a")
    assert layer("burtorch") > layer("burtorch.nn.module")  # the facade is above what it hands out
