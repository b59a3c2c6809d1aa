"""Memory cost of node labels: the same graph built with labels off and on.

For each N, a fresh interpreter per mode builds N labelled leaves and N labelled products
(label strings are passed in both modes; with labels off they are dropped), keeping no Python
handles. Reported: the arena's own accounting (stats()["bytes"]["labels"], bytes_in_use) and the
growth of the process's resident memory while building (arena memory is reserved up front in
both modes, so the difference is the labels' side table).

    python -m burtorch_bench.label_memory [N ...]        (default: 10000 100000 1000000)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from burtorch.cli.arguments import positive_int

CHILD = r"""
import json, os, sys
import burtorch as bt

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

n, on = int(sys.argv[1]), sys.argv[2] == "on"
arena = bt.Arena(bt.float64)
arena.reserve(2 * n, n, 2 * n)
bt.labels(on)
before = rss()
with arena:
    for i in range(n):
        x = bt.Value(float(i), label=f"x{i}")
        y = x * 2.0
        y.label = f"y{i}"
del x, y
after = rss()
s = arena.stats()
print(json.dumps({"labels": s["labels"], "label_bytes": s["bytes"]["labels"],
                  "in_use": s["bytes_in_use"], "nodes": s["nodes"], "rss_growth": after - before}))
"""


def measure(n: int, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(n), mode], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m burtorch_bench.label_memory",
                                description="Memory of node labels: the same graph of N labelled leaves and "
                                            "N labelled products built with labels off and on, each in a "
                                            "fresh interpreter (Linux: reads /proc/self/statm).")
    p.add_argument("sizes", nargs="*", type=positive_int, metavar="N",
                   help="graph sizes (default: 10000 100000 1000000)")
    sizes = p.parse_args(argv).sizes or [10_000, 100_000, 1_000_000]
    print("command: python -m burtorch_bench.label_memory " + " ".join(str(s) for s in sizes))
    print("| nodes | labels | label bytes (arena) | bytes in use (arena) | RSS growth while building |")
    print("|---|---|---|---|---|")
    for n in sizes:
        for mode in ("off", "on"):
            r = measure(n, mode)
            per = f" ({r['label_bytes'] / r['labels']:.1f} B/label)" if r["labels"] else ""
            print(f"| {r['nodes']:,} | {mode} ({r['labels']:,} stored) | {r['label_bytes']:,}{per} | "
                  f"{r['in_use']:,} | {r['rss_growth']:,} |")


if __name__ == "__main__":
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/statm"):
        sys.exit("this measurement reads /proc/self/statm (Linux)")
    main()
