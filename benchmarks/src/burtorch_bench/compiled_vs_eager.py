"""Recorded programs against eager burtorch, side by side in one process: W1 and W2 (the .map of
n samples against n eager iterations), W4 e=4 and W5 at b = 1 and 64 (grad_oracle(compile=True)
against the eager oracle, each followed by the SGD step). The timed regions are those of
`burtorch-bench` (the same runners); here each repetition times eager and compiled back to back,
alternating which goes first, so both see the same load, and the ratio reported is the median of
the per-repetition ratios.

    taskset -c 0 python -m burtorch_bench.compiled_vs_eager [--reps 9] [--steps 20] [--data DIR]
"""
from __future__ import annotations

import argparse
import statistics
import time

from .frameworks import impl_burtorch, impl_burtorch_compiled

# (label, workload, config, units per timed run, target for compiled / eager)
CASES: tuple[tuple[str, str, dict[str, int], int | None, float | None], ...] = (
    ("W1, 100,000 iterations", "tiny", {}, 100_000, 1 / 8),
    ("W2, 20,000 iterations", "small", {}, 20_000, 1 / 8),
    ("W5 b=1", "gpt", {"b": 1}, None, 0.6),
    ("W5 b=64", "gpt", {"b": 64}, None, 0.7),
    ("W4 e=4 b=1", "mlp", {"e": 4, "b": 1}, None, 0.6),
    ("W4 e=4 b=64", "mlp", {"e": 4, "b": 64}, None, None),
)


def _timed(runner, n):
    t = time.perf_counter()
    runner.run("step", n)
    return time.perf_counter() - t


def measure(workload, config, units, reps, steps, data):
    """(eager seconds per timed run, compiled seconds, per-repetition compiled / eager ratios);
    a timed run is `units` iterations for W1/W2 and one training step for W4/W5."""
    n = units or steps
    cfg = dict(config, warmup=1, reps=reps, n=n, data=data)
    eager = impl_burtorch.make_runner(workload, "", cfg)
    compiled = impl_burtorch_compiled.make_runner(workload, "", cfg)
    for r in (eager, compiled):  # warm-up (the compiled runner traces here)
        r.run("step", 1)
    te, tc, ratios = [], [], []
    for rep in range(reps):
        if rep % 2:
            c, e = _timed(compiled, n), _timed(eager, n)
        else:
            e, c = _timed(eager, n), _timed(compiled, n)
        per = 1 if units else n
        te.append(e / per)
        tc.append(c / per)
        ratios.append(c / e)
    agree = eager.numbers() == compiled.numbers() if units else True
    return statistics.median(te), statistics.median(tc), ratios, agree


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.compiled_vs_eager",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=9, help="timed repetitions of each mode (default 9)")
    ap.add_argument("--steps", type=int, default=20, help="training steps per timed repetition (W4/W5; default 20)")
    ap.add_argument("--data", metavar="DIR", help="names.txt / tinyshakespeare.txt (default: the embedded corpus)")
    ap.add_argument("--only", help="comma-separated labels' first words to run (W1,W2,W4,W5)")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    print(f"medians of {args.reps} repetitions, eager and compiled back to back in each; W1/W2 in s per run, "
          "W4/W5 in ms per training step")
    print(f"{'workload':<24} {'eager':>10} {'compiled':>10} {'compiled/eager':>15} {'speed-up':>9}  target")
    for label, workload, config, units, target in CASES:
        if only and label.split(",")[0].split()[0] not in only:
            continue
        e, c, ratios, agree = measure(workload, config, units, args.reps, args.steps, args.data)
        ratio = statistics.median(ratios)
        scale = 1 if units else 1e3
        if target is None:
            verdict = "-"
        else:
            verdict = (f">= {1 / target:.0f}x faster" if target < 0.5 else f"<= {target}") + \
                (" met" if ratio <= target else " MISSED")
        print(f"{label:<24} {e * scale:>10.4g} {c * scale:>10.4g} {ratio:>15.3f} {1 / ratio:>8.2f}x  {verdict}"
              f"{'' if agree else '  (the numbers differ!)'}")

if __name__ == "__main__":
    main()
