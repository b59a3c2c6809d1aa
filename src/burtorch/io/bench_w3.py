"""W3 (BENCHMARKS.md): save the values of 7 nodes of the W2 graph to a file and load them back,
5,000 times each; time both and report the file size.

``run_w3(iterations=5000) -> dict`` is what the bench helper calls. Run this module to print a
table with PyTorch's torch.save / torch.load of the same 7 numbers (as one float64 tensor) beside
it, medians of several runs, in the same process::

    python -m burtorch.io.bench_w3 [--iterations 5000] [--repeats 5] [--dir DIR] [--no-torch]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import burtorch as bt
from burtorch import workloads

from . import load, save


def w2_nodes():
    """The 7 named nodes a..g of the paper's Figure 2 graph (FP64, after backward)."""
    arena = bt.current_arena(bt.float64)
    nodes = workloads.w2_nodes(lambda x: bt.Value(x, arena=arena))
    nodes[-1].backward()
    return list(nodes)


def run_w3(iterations: int = 5000, directory: str | None = None, atomic: bool = True) -> dict:
    """Times ``iterations`` saves and then ``iterations`` loads of 7 W2 nodes' values to one file."""
    with bt.scope():
        nodes = w2_nodes()
        expected = [v.data for v in nodes]
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            path = os.path.join(tmp, "w3.bt")
            t0 = time.perf_counter()
            for _ in range(iterations):
                save(path, nodes, what="values", atomic=atomic)
            t1 = time.perf_counter()
            for v in nodes:
                v.data = 0.0
            t2 = time.perf_counter()
            for _ in range(iterations):
                load(path, nodes, what="values")
            t3 = time.perf_counter()
            size = os.path.getsize(path)
        if [v.data for v in nodes] != expected:
            raise AssertionError("W3: loaded values differ from the saved ones")
    return {
        "workload": "W3",
        "iterations": iterations,
        "save_s": t1 - t0,
        "load_s": t3 - t2,
        "file_bytes": size,
        "payload_bytes": 7 * 8,
        "atomic": atomic,
        "directory": directory or tempfile.gettempdir(),
    }


def _torch_w3(iterations: int, directory: str | None) -> dict:
    import torch

    with bt.scope():
        tensor = torch.tensor([v.data for v in w2_nodes()], dtype=torch.float64)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        path = os.path.join(tmp, "w3.pt")
        t0 = time.perf_counter()
        for _ in range(iterations):
            torch.save(tensor, path)
        t1 = time.perf_counter()
        for _ in range(iterations):
            loaded = torch.load(path)
        t2 = time.perf_counter()
        size = os.path.getsize(path)
    if not torch.equal(loaded, tensor):
        raise AssertionError("W3 torch: loaded tensor differs")
    return {"save_s": t1 - t0, "load_s": t2 - t1, "file_bytes": size}


def _median_row(runs):
    def cell(key):
        xs = [r[key] for r in runs]
        return f"{statistics.median(xs):.4f} ({min(xs):.4f}-{max(xs):.4f})"
    return cell("save_s"), cell("load_s"), runs[0]["file_bytes"]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dir", default=None, help="directory for the files (default: the temp dir)")
    p.add_argument("--no-torch", action="store_true")
    args = p.parse_args(argv)
    rows = []
    for atomic in (True, False):
        runs = [run_w3(args.iterations, args.dir, atomic) for _ in range(args.repeats)]
        rows.append((f"burtorch io.save/load (atomic={atomic})",) + _median_row(runs))
    if not args.no_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("torch is not installed: skipping torch.save/torch.load")
        else:
            runs = [_torch_w3(args.iterations, args.dir) for _ in range(args.repeats)]
            rows.append(("torch.save/torch.load",) + _median_row(runs))
    where = args.dir or tempfile.gettempdir()
    print(f"W3: {args.iterations} saves and {args.iterations} loads of 7 float64 values, files in {where}; "
          f"median (min-max) of {args.repeats} runs")
    print(f"command: {os.path.basename(sys.executable)} -m burtorch.io.bench_w3 "
          + " ".join(argv if argv is not None else sys.argv[1:]))
    print(f"| {'variant':<40} | {'save s':<24} | {'load s':<24} | file bytes |")
    print(f"|{'-' * 42}|{'-' * 26}|{'-' * 26}|------------|")
    for name, save_cell, load_cell, size in rows:
        print(f"| {name:<40} | {save_cell:<24} | {load_cell:<24} | {size:>10} |")


if __name__ == "__main__":
    main()
