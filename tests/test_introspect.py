"""burtorch.introspect: the memory report, and labels costing nothing when none is given."""
import pytest

import burtorch as bt
from burtorch.introspect import format_stats, human_bytes, memory_report


def build(arena, n, labelled):
    """n leaves and n products, each labelled when `labelled` (labels stay off: a label given is
    stored all the same)."""
    kept = []  # the nodes stay (dropped ones would be reclaimed): returned to the caller
    with arena:
        for i in range(n):
            x = bt.Value(float(i), label=f"x{i}" if labelled else None)
            y = x * 2.0
            if labelled:
                y.label = f"y{i}"
            kept.append(y)
    return kept


def test_no_label_given_uses_no_label_memory():
    off, on = bt.Arena(bt.float64), bt.Arena(bt.float64)
    keep_off = build(off, 500, False)  # noqa: F841  (the nodes must stay alive)
    keep_on = build(on, 500, True)  # noqa: F841
    s_off, s_on = off.stats(), on.stats()
    assert s_off["labels"] == 0 and s_off["bytes"]["labels"] == 0
    assert s_on["labels"] == 1000 and s_on["bytes"]["labels"] > 0
    assert s_on["bytes_in_use"] - s_off["bytes_in_use"] == s_on["bytes"]["labels"]


def test_memory_report_lists_every_category(capsys):
    arena = bt.Arena(bt.float32)
    kept = build(arena, 10, True)  # noqa: F841
    text = memory_report(arena)
    assert capsys.readouterr().out.strip() == text
    s = arena.stats()
    assert "arena float32" in text and f"nodes {s['nodes']:,}" in text
    for name, b in s["bytes"].items():
        line = next(line for line in text.splitlines() if line.startswith(name))
        assert f"{b:,}" in line
    assert f"{s['bytes_in_use']:,}" in text
    both = memory_report(file=False)
    assert "arena float32" in both and "arena float64" in both
    assert capsys.readouterr().out == ""


def test_empty_arena_and_units():
    text = format_stats(bt.Arena(bt.float64).stats())
    assert "nodes 0" in text
    assert human_bytes(512) == "512 B" and human_bytes(2048) == "2.0 KiB" and human_bytes(3 << 30) == "3.0 GiB"


def test_tool_modules_import_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, burtorch.io, burtorch.viz, burtorch.viz.plots, burtorch.views, burtorch.introspect\n"
            "print(sorted(m for m in ('numpy', 'matplotlib', 'graphviz', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"  # (an editable install may print a rebuild line first)


@pytest.mark.parametrize("skip, heavy_roots, least", [
    # the library without the federated package and the research methods (which work on numpy
    # arrays): no numpy, no matplotlib
    (("burtorch.cli", "burtorch.__main__", "burtorch.fl")
     + tuple(f"burtorch.optim.{m}" for m in ("estimator", "methods", "compressors", "rounds", "server")),
     ("numpy", "matplotlib"), 30),
    # burtorch.fl works on numpy arrays (its extra installs numpy), but still without matplotlib
    (("burtorch.cli", "burtorch.__main__"), ("matplotlib",), 40),
])
def test_the_library_imports_neither_the_benchmarks_nor_the_app_nor_heavy_packages(skip, heavy_roots, least):
    """Every module of the library (the engine, nn, optim, data, io, viz, fl) imported in a fresh
    interpreter leaves the benchmark laboratory (benchmarks/), burtorch.cli and the heavy packages unimported."""
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, sys, burtorch\n"
        "names = []\n"
        f"skip = {skip!r}\n"
        "def walk(package):\n"
        "    for m in pkgutil.iter_modules(package.__path__, package.__name__ + '.'):\n"
        # the extension's per-ISA builds (_core_generic, ...): each is burtorch._core under
        # another file name, loaded by burtorch._isa, not importable by its own name
        "        if m.name in skip or m.name.rpartition('.')[2].startswith('_core_'):\n"
        "            continue\n"
        "        names.append(m.name)\n"
        "        module = importlib.import_module(m.name)\n"
        "        if m.ispkg:\n"
        "            walk(module)\n"
        "walk(burtorch)\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {heavy_roots!r}\n"
        "               or m.startswith(('burtorch_bench', 'burtorch.cli')))\n"
        "print(len(names), heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    count, heavy = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(count) >= least and heavy == "[]"
