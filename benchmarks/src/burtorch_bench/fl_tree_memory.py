"""Memory of a federated run's whole process tree: the driver and every process it started
(worker processes, or Ray's daemons and actors when Ray is started here), summed resident sets
read from /proc while the run is live, after its rounds. Linux only.

    python -m burtorch_bench.fl_tree_memory [--executor processes|ray] [--clients 1000] [--workers 2]

Shared pages are counted once per process (RSS, not PSS): an upper bound of what the tree holds.
"""
from __future__ import annotations

import argparse
import os
import sys


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_mb(root: int | None = None) -> tuple[float, int]:
    """(summed RSS in MB, number of processes) of ``root`` (default: this process) and its descendants."""
    kids = _children()
    todo, seen = [root or os.getpid()], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo.extend(kids.get(pid, []))
    return sum(_rss_kb(p) for p in seen) / 1024, len(seen)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m burtorch_bench.fl_tree_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--executor", choices=("processes", "ray"), default="processes")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    if not os.path.isdir("/proc"):
        print("needs Linux's /proc", file=sys.stderr)
        return 1
    from burtorch.fl import Federation, make_compressor, make_method
    from burtorch.fl.logistic import synthetic

    problem = synthetic(args.clients, samples=20 * args.clients, dim=30, seed=0)
    method = make_method("ef21", compressor=make_compressor("topk", 30, 1))
    before, _ = tree_rss_mb()
    with Federation(problem, method, executor=args.executor, workers=args.workers, seed=0, eval_every=0) as fed:
        fed.run(args.rounds)
        total, count = tree_rss_mb()
    print(f"{args.clients:,} clients (EF21 + Top-1, d = 30, 20 samples each) on {args.executor} x{args.workers}: "
          f"process tree {total:.0f} MB over {count} processes (driver alone before: {before:.0f} MB; "
          f"load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
