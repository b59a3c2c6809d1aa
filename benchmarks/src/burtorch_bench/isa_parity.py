"""Two builds of burtorch's extension on the benchmark grid, side by side: the dispatched wheel's
level against a build for this CPU alone (``-march=native``).

    python -m burtorch_bench.isa_parity --a avx512 --b native@/path/to/python --rounds 9

Each side is ``ISA[@PYTHON]``: the interpreter (default: this one) and the ``BURTORCH_ISA`` it is
started with, so two extension files beside one package (``_core_avx512`` and ``_core_native``)
or two installs compare alike. The grid is the issue's: W1, W4 at e = 4, 64, 1024 and b = 1, 64,
W5 at b = 1, 64 (the ``burtorch`` row, one thread, the preset's repetitions unless ``--reps``). Every round
runs each configuration once per side, each run a fresh process pinned to one core, A then B on
even rounds and B then A on odd ones, so that the host's drift weighs on both alike; a row's
figure is the median over rounds of the per-round ratio A/B of the two runs' median step times
(below 1: A is faster), with the lowest and highest ratio beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from . import frameworks as fw
from . import harness

GRID = {"tiny": [{}], "mlp": [{"e": e, "b": b} for e in (4, 64, 1024) for b in (1, 64)],
        "gpt": [{"b": 1}, {"b": 64}]}
LABELS = {"tiny": "W1", "mlp": "W4", "gpt": "W5"}


def side(text: str) -> tuple[str, str]:
    """``ISA[@PYTHON]`` -> (isa, python)."""
    isa, _, python = text.partition("@")
    if not isa:
        raise argparse.ArgumentTypeError(f"expected ISA[@PYTHON], got {text!r}")
    return isa, python or sys.executable


def jobs_for(workload: str, point: dict, sides, preset: str, reps: int | None = None) -> list:
    entry = fw.BY_NAME["burtorch"]
    overrides = {"embed": [point["e"]] if "e" in point else None, "batch": [point["b"]] if "b" in point else None,
                 "reps": reps}
    (config,) = [c for c in harness.configs_for(workload, entry, preset, overrides)
                 if all(c.get(k) == v for k, v in point.items())]
    return [harness.Job(entry, workload, config, python=python, label=isa, env={"BURTORCH_ISA": isa})
            for isa, python in sides]


def step_seconds(result: dict) -> float:
    """The run's median time of one unit (a step, or one W1 graph)."""
    if result.get("status") != "ok":
        raise RuntimeError(f"{result.get('name')}: {result.get('message', result.get('status'))}")
    (phase, samples), = ((p, s) for p, s in result["times"].items() if p == "step" or len(result["times"]) == 1)
    return statistics.median(samples) / result["n"][phase]


def row_label(workload: str, point: dict) -> str:
    return " ".join([LABELS[workload], *(f"{k}={v}" for k, v in point.items())])


def measure(sides, rounds: int, preset: str = "quick", cpu=None, only=None, progress=None,
            reps: int | None = None) -> list[dict]:
    """One dict per grid row: the per-round ratios A/B and each side's step times."""
    rows = []
    for workload, points in GRID.items():
        for point in points:
            label = row_label(workload, point)
            if only and not any(o in label for o in only):
                continue
            rows.append({"row": label, "jobs": jobs_for(workload, point, sides, preset, reps), "a": [], "b": []})
    for r in range(rounds):
        for row in rows:
            order = (0, 1) if r % 2 == 0 else (1, 0)
            got = {}
            for i in order:
                got[i] = step_seconds(harness.run_job(row["jobs"][i], cpu=cpu))
            row["a"].append(got[0])
            row["b"].append(got[1])
            if progress:
                progress(f"round {r + 1}/{rounds} {row['row']}: A/B {got[0] / got[1]:.3f}")
    out = []
    for row in rows:
        ratios = sorted(a / b for a, b in zip(row["a"], row["b"]))
        out.append({"row": row["row"], "rounds": len(ratios), "ratio_median": statistics.median(ratios),
                    "ratio_min": ratios[0], "ratio_max": ratios[-1],
                    "a_median_s": statistics.median(row["a"]), "b_median_s": statistics.median(row["b"])})
    return out


def render(rows: list[dict], a: str, b: str) -> str:
    lines = [f"| row | {a} / {b} (median) | min | max | {a} ms | {b} ms |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['ratio_median']:.3f} | {r['ratio_min']:.3f} | {r['ratio_max']:.3f} | "
                     f"{r['a_median_s'] * 1e3:.4g} | {r['b_median_s'] * 1e3:.4g} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m burtorch_bench.isa_parity", description=__doc__.split("\n\n")[0])
    p.add_argument("--a", type=side, required=True, help="ISA[@PYTHON]: the side whose time is the numerator")
    p.add_argument("--b", type=side, required=True, help="ISA[@PYTHON]: the denominator")
    p.add_argument("--rounds", type=int, default=7, help="runs of every configuration per side (default 7)")
    p.add_argument("--preset", default="quick", choices=sorted(harness.PRESETS))
    p.add_argument("--reps", type=int, default=None, help="timed repetitions in each run (default: the preset's)")
    p.add_argument("--only", action="append", help="rows whose label contains this text (e.g. 'W4 e=64'), repeatable")
    p.add_argument("--cpu", type=int, default=None, help="the core every run is pinned to (default: the last one)")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args(argv)
    if args.rounds < 1 or (args.reps is not None and args.reps < 1):
        p.error("--rounds and --reps must be at least 1")
    cpu = harness.default_cpu() if args.cpu is None else args.cpu
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    rows = measure([args.a, args.b], args.rounds, args.preset, cpu=cpu, only=args.only,
                   progress=lambda m: print(m, file=sys.stderr, flush=True), reps=args.reps)
    a, b = args.a[0], args.b[0]
    print(render(rows, a, b))
    end_load = os.getloadavg() if hasattr(os, "getloadavg") else None
    if load and end_load:
        print(f"\nload average (1 min) at start {load[0]:.2f}, at end {end_load[0]:.2f}; {os.cpu_count()} CPUs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"a": args.a, "b": args.b, "load": [load, end_load], "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
