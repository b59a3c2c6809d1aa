"""W3 in one process: the ways burtorch can save 7 node values beside torch.save and np.save.

``burtorch-bench saveload`` runs each framework in its own pinned process; this script instead
times the variants of ``bt.io.save`` (durable: fsync + rename, the default; atomic without fsync;
in place) next to the peers, side by side in one run, so what durability costs is visible::

    python -m burtorch_bench.saveload [--iterations 5000] [--repeats 5] [--dir DIR]
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from burtorch.cli.arguments import positive_int

from .specs import W3_NAMES, close, w2_values


def _variants(directory: str) -> list[tuple[str, Callable[[], Any]]]:
    """(name, factory) of every W3 runner available here."""
    from .frameworks import impl_burtorch

    out: list[tuple[str, Callable[[], Any]]] = [
        ("burtorch io.save (default: atomic, durable)",
         lambda: impl_burtorch.SaveLoadRunner(directory, atomic=True, durable=True)),
        ("burtorch io.save(durable=False)",
         lambda: impl_burtorch.SaveLoadRunner(directory, atomic=True, durable=False)),
        ("burtorch io.save(atomic=False)",
         lambda: impl_burtorch.SaveLoadRunner(directory, atomic=False)),
    ]
    for label, module in (("torch.save / torch.load", "impl_torch"), ("np.save / np.load", "impl_numpy")):
        try:
            mod = __import__(f"{__package__}.frameworks.{module}", fromlist=["make_runner"])
        except ImportError:
            print(f"{label}: not installed, skipped")
            continue
        out.append((label, functools.partial(mod.make_runner, "saveload", "plain", {"dir": directory})))
    return out


def _time(runner, phase: str, n: int) -> float:
    t = time.perf_counter()
    runner.run(phase, n)
    return time.perf_counter() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m burtorch_bench.saveload",
                                description="W3: saves and loads of the 7 node values of the paper's "
                                            "Figure 2 graph, burtorch's variants beside torch and numpy.")
    p.add_argument("--iterations", type=positive_int, default=5000, help="saves (and loads) per run")
    p.add_argument("--repeats", type=positive_int, default=5, help="runs; medians are reported")
    p.add_argument("--dir", default=None, help="directory for the files (default: the temp dir)")
    args = p.parse_args(argv)
    expected = w2_values()
    rows = []
    for name, factory in _variants(args.dir):
        runner = factory()
        try:
            saves, loads = [], []
            for _ in range(args.repeats):  # interleaved, so drifts of the machine hit both alike
                saves.append(_time(runner, "save", args.iterations))
                loads.append(_time(runner, "load", args.iterations))
            numbers = runner.numbers()
        finally:
            runner.close()
        if not all(close(numbers[k], expected[k], 1e-12) for k in W3_NAMES):
            raise SystemExit(f"{name}: loaded values differ from the saved ones: {numbers}")
        rows.append((name, saves, loads, numbers["file bytes"]))
    where = args.dir or tempfile.gettempdir()
    print(f"command: python -m burtorch_bench.saveload {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(f"W3: {args.iterations} saves, then {args.iterations} loads, of 7 float64 values; files in "
          f"{where}; median (min-max) of {args.repeats} runs, in seconds")
    print(f"| {'variant':<44} | {'save s':<24} | {'load s':<24} | file bytes |")
    print(f"|{'-' * 46}|{'-' * 26}|{'-' * 26}|------------|")
    for name, saves, loads, size in rows:
        cells = [f"{statistics.median(x):.4f} ({min(x):.4f}-{max(x):.4f})" for x in (saves, loads)]
        print(f"| {name:<44} | {cells[0]:<24} | {cells[1]:<24} | {size:>10} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
