"""Memory of a federated run's whole process tree: the driver and every process it started
(worker processes, or Ray's daemons and actors when Ray is started here), read from /proc while
the run is live, after its rounds. Linux only.

    python -m burtorch_bench.fl_tree_memory [--executor processes|ray] [--clients 1000] [--workers 2]
                                            [--by-process] [--bare]

Two sums: RSS counts a page shared by several processes (the Python interpreter, numpy, Ray's
core library, the object store's mapping) once in every process that maps it, an upper bound;
PSS (/proc/PID/smaps_rollup) charges each process its share of such a page, so the sum counts
every page once: what the tree takes from the machine. PSS is the figure compared with a budget.

With the Ray executor, the same local Ray node is also measured in a fresh interpreter that imports
neither burtorch nor numpy, holding ``--workers`` empty actors (``--bare`` measures only that):
Ray's own floor, what no change to burtorch can take below.
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


def _field_kb(path: str, key: str) -> int:
    """The kB figure of the line starting with ``key`` in a /proc file (0 if the process is gone)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_kb(pid: int) -> int:
    return _field_kb(f"/proc/{pid}/status", "VmRSS:")


def _pss_kb(pid: int) -> int:
    return _field_kb(f"/proc/{pid}/smaps_rollup", "Pss:")


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    # a Python daemon is named by its script, a Ray actor by its title, a binary by its path
    script = next((a for a in args[1:3] if a.endswith(".py")), None)
    return os.path.basename(script or args[0]) or "?"


def tree(root: int | None = None) -> list[tuple[int, str, float, float]]:
    """(pid, name, RSS MB, PSS MB) of ``root`` (default: this process) and its descendants."""
    kids = _children()
    todo, seen = [root or os.getpid()], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo.extend(kids.get(pid, []))
    return [(p, _name(p), _rss_kb(p) / 1024, _pss_kb(p) / 1024) for p in seen]


def tree_rss_mb(root: int | None = None) -> tuple[float, int]:
    """(summed RSS in MB, number of processes) of ``root`` (default: this process) and its descendants."""
    rows = tree(root)
    return sum(r[2] for r in rows), len(rows)


# The local node burtorch.fl.ray_executor starts (_init; kept equal to it by hand, since importing
# that module imports burtorch, which the bare measurement must not).
BARE_RAY = """
import os, sys
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
import ray
from ray.cluster_utils import Cluster
node = Cluster(initialize_head=True, head_node_args={{
    "num_cpus": {workers}, "num_gpus": 0, "include_dashboard": False, "include_log_monitor": False,
    "no_monitor": True, "object_store_memory": 75 * 1024 * 1024}})
ray.init(address=node.address, log_to_driver=False)

class Empty:
    def ping(self):
        return os.getpid()

actors = [ray.remote(num_cpus=1)(Empty).remote() for _ in range({workers})]
ray.get([a.ping.remote() for a in actors])
print(repr(("burtorch" in sys.modules, "numpy" in sys.modules)), flush=True)
sys.stdin.readline()  # the parent reads this tree from /proc meanwhile
ray.shutdown()
node.shutdown()
"""


def bare_ray(workers: int) -> tuple[list[tuple[int, str, float, float]], bool, bool]:
    """(the tree's rows, burtorch imported, numpy imported) of a driver with ``workers`` empty
    actors on burtorch's lean local node, measured in a fresh interpreter."""
    import ast
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", BARE_RAY.format(workers=workers)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError("the bare Ray driver failed to start its node")
        with_bt, with_np = ast.literal_eval(line.strip())
        rows = tree(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
    finally:
        if child.wait(timeout=60) is None:
            child.kill()
    return rows, with_bt, with_np


def _print_rows(rows: list[tuple[int, str, float, float]]) -> None:
    for pid, name, r, q in sorted(rows, key=lambda row: -row[3]):
        print(f"  {pid:>8}  PSS {q:6.1f} MB  RSS {r:6.1f} MB  {name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m burtorch_bench.fl_tree_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--executor", choices=("processes", "ray"), default="processes")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--by-process", action="store_true", help="also print each process's RSS and PSS")
    p.add_argument("--bare", action="store_true",
                   help="only Ray's floor: the same local node, a driver and --workers empty actors, no burtorch")
    args = p.parse_args(argv)
    if not os.path.isdir("/proc"):
        print("needs Linux's /proc", file=sys.stderr)
        return 1
    bare = None
    if args.bare or args.executor == "ray":
        rows, with_bt, with_np = bare_ray(args.workers)
        bare = sum(r[3] for r in rows)
        print(f"Ray's floor: the same local node with a driver and {args.workers} empty actors (burtorch "
              f"imported: {'yes' if with_bt else 'no'}, numpy imported by Ray: {'yes' if with_np else 'no'}): "
              f"PSS {bare:.0f} MB, RSS {sum(r[2] for r in rows):.0f} MB over {len(rows)} processes")
        if args.by_process:
            _print_rows(rows)
        if args.bare:
            return 0
    from burtorch.fl import Federation, make_compressor, make_method
    from burtorch.fl.logistic import synthetic

    problem = synthetic(args.clients, samples=20 * args.clients, dim=30, seed=0)
    method = make_method("ef21", compressor=make_compressor("topk", 30, 1))
    before, _ = tree_rss_mb()
    with Federation(problem, method, executor=args.executor, workers=args.workers, seed=0, eval_every=0) as fed:
        fed.run(args.rounds)
        rows = tree()
    rss, pss = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"{args.clients:,} clients (EF21 + Top-1, d = 30, 20 samples each) on {args.executor} x{args.workers}: "
          f"process tree PSS {pss:.0f} MB, RSS {rss:.0f} MB over {len(rows)} processes (driver alone before: "
          f"{before:.0f} MB RSS; load average {os.getloadavg()[0]:.2f})")
    if bare is not None:
        print(f"  of which above Ray's floor: {pss - bare:.0f} MB PSS (burtorch, numpy, the clients' data and state)")
    if args.by_process:
        _print_rows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
