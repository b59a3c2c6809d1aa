"""`burtorch train` with no flags (the planned step) against hand-picked flags, side by side.

    python -m burtorch_bench.planned_train [--rounds 3] [--cpus 0 | 0,1] [--steps N] [--memory-batches 1,32,256]

Each round runs every configuration once as a fresh process, in turns (A, B, C, A, B, C, ...),
so a shared host's load falls on all of them alike; the table gives each one's median wall time,
its ratio to the fastest hand-picked configuration, its final validation loss and peak RSS.
Then the memory rows: peak RSS of `--memory sample` against the paper's `--plan eager` at several
batch sizes (a short run each).
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

from burtorch.cli.arguments import positive_int

DEFAULT = ("no flags (planned)", [])
HAND = [("--plan eager (the paper's path)", ["--plan", "eager"]),
        ("--compile --chunk 32", ["--compile", "--chunk", "32"]),
        ("--compile --chunk 32 --threads 2", ["--compile", "--chunk", "32", "--threads", "2"])]

# resource.getrusage(RUSAGE_CHILDREN) in an intermediate process: that child's own peak alone
_PROBE = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
          "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
          "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr); "
          "print('@@', time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
          "sys.exit(p.returncode)")


def run_train(args: list[str], cpus: str | None) -> dict:
    """One `burtorch train gpt ARGS` process: wall seconds, peak RSS (MB), final validation loss, plan line."""
    cmd = [sys.executable, "-c", _PROBE, sys.executable, "-m", "burtorch", "train", "gpt", "--sample", "0", *args]
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    wall, rss = re.search(r"@@ (\S+) (\d+)", done.stdout).groups()
    val = re.search(r"final validation loss (\S+)", done.stdout)
    plan = next((line for line in done.stdout.splitlines() if line.startswith("plan: ")), "")
    return {"wall": float(wall), "rss": int(rss) / 1024, "val": float(val.group(1)) if val else None, "plan": plan}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.planned_train", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=positive_int, default=3, help="runs of each configuration (default 3)")
    ap.add_argument("--cpus", help="taskset CPU list for every run (e.g. 0 for one core, 0,1 for two)")
    ap.add_argument("--steps", type=positive_int, help="training steps (default: burtorch train's 3000)")
    ap.add_argument("--memory-batches", default="1,32,256", help="batch sizes of the memory rows ('' for none)")
    args = ap.parse_args(argv)
    extra = ["--steps", str(args.steps)] if args.steps else []
    cores = len(args.cpus.split(",")) if args.cpus else len(os.sched_getaffinity(0))
    configs = [DEFAULT] + [h for h in HAND if "--threads" not in h[1] or cores >= 2]
    results: dict = {name: [] for name, _ in configs}
    for _ in range(args.rounds):
        for name, flags in configs:
            results[name].append(run_train([*flags, *extra], args.cpus))
    med = {name: statistics.median(r["wall"] for r in rs) for name, rs in results.items()}
    best_hand = min(med[name] for name, _ in configs[1:])
    print(f"burtorch train gpt, {args.rounds} rounds in turns, CPUs {args.cpus or 'all'} ({cores})")
    print(f"{'configuration':36s} {'median s':>9s} {'x best hand':>12s} {'final val':>10s} {'peak MB':>8s}")
    for name, rs in results.items():
        vals = sorted({r['val'] for r in rs})
        print(f"{name:36s} {med[name]:9.2f} {med[name] / best_hand:12.3f} {','.join(f'{v:.4f}' for v in vals):>10s} "
              f"{max(r['rss'] for r in rs):8.1f}")
    plans = sorted({r["plan"].split(" (")[0] for r in results[DEFAULT[0]]})
    print("plans chosen by the planned runs:", "; ".join(plans))
    batches = [int(b) for b in args.memory_batches.split(",") if b]
    if batches:
        print(f"\npeak RSS (MB), 200 steps, batch b: {'--plan eager':>14s} {'--memory sample':>16s} {'no flags':>10s}")
        for b in batches:
            short = ["--steps", "200", "--batch", str(b), "--eval-every", "200"]
            row = [run_train([*flags, *short], args.cpus)["rss"]
                   for flags in (["--plan", "eager"], ["--memory", "sample"], [])]
            print(f"{'b=' + str(b):34s} {row[0]:14.1f} {row[1]:16.1f} {row[2]:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
