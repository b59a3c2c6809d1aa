"""Recorded programs against eager burtorch, side by side in one process: W1 and W2 (the .map of
n samples against n eager iterations), W4 e=4 and W5 at b = 1 and 64 (grad_oracle(compile=True)
against the eager per-sample oracle, grad_oracle(model, batch), the paper's default path; each
followed by the SGD step). The timed regions are those of `burtorch-bench` (the same runners:
the `burtorch` and `burtorch-compiled` rows); here each repetition times eager and compiled back
to back, alternating which goes first, so both see the same load, and the ratio reported is the
median of the per-repetition ratios. The verdict is read off the ratio as printed, so the two
never disagree.

    taskset -c 0 python -m burtorch_bench.compiled_vs_eager [--reps 9] [--steps 20] [--data DIR]
"""
from __future__ import annotations

import argparse
import statistics
import time

from burtorch.cli.arguments import positive_int

from .frameworks import impl_burtorch, impl_burtorch_compiled

# The runners' variants of the `burtorch` and `burtorch-compiled` rows: per sample, both. (The
# default variant of impl_burtorch runs the batch in chunks of 64, another row, `burtorch-chunk`.)
EAGER, COMPILED = "eager", ""

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
    eager = impl_burtorch.make_runner(workload, EAGER, cfg)
    compiled = impl_burtorch_compiled.make_runner(workload, COMPILED, cfg)
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


def verdict(ratio: float, target: float | None) -> tuple[str, str, str]:
    """(compiled / eager, speed-up, verdict) as printed: the verdict is decided on the ratio as it
    is shown (3 decimals) and the speed-up is that ratio's inverse, so a line never shows a met
    target as missed or the reverse. A target below 1/2 reads as a speed-up ("at least 8x
    faster"), others as a ratio ("<= 0.6")."""
    shown = round(ratio, 3)
    speed = f"{1 / shown:.2f}x" if shown > 0 else "inf"
    if target is None:
        return f"{shown:.3f}", speed, "-"
    goal = f">= {1 / target:.0f}x faster" if target < 0.5 else f"<= {target}"
    return f"{shown:.3f}", speed, goal + (" met" if shown <= target else " MISSED")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.compiled_vs_eager",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=positive_int, default=9, help="timed repetitions of each mode (default 9)")
    ap.add_argument("--steps", type=positive_int, default=20,
                    help="training steps per timed repetition (W4/W5; default 20)")
    ap.add_argument("--data", metavar="DIR", help="names.txt / tinyshakespeare.txt (default: the embedded corpus)")
    ap.add_argument("--only", help="comma-separated labels' first words to run (W1,W2,W4,W5)")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    known = {label.split(",")[0].split()[0] for label, *_ in CASES}
    if only and not only <= known:
        ap.error(f"--only: unknown {sorted(only - known)}; choose from {sorted(known)}")
    print(f"medians of {args.reps} repetitions, eager (per sample) and compiled back to back in each; W1/W2 in s "
          "per run, W4/W5 in ms per training step")
    print(f"{'workload':<24} {'eager':>10} {'compiled':>10} {'compiled/eager':>15} {'speed-up':>9}  target")
    for label, workload, config, units, target in CASES:
        if only and label.split(",")[0].split()[0] not in only:
            continue
        e, c, ratios, agree = measure(workload, config, units, args.reps, args.steps, args.data)
        scale = 1 if units else 1e3
        ratio, speed, text = verdict(statistics.median(ratios), target)
        print(f"{label:<24} {e * scale:>10.4g} {c * scale:>10.4g} {ratio:>15} {speed:>9}  {text}"
              f"{'' if agree else '  (the numbers differ!)'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
