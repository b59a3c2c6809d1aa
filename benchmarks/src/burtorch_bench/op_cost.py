"""What one scalar op costs from Python, in nanoseconds, split into its parts.

    python -m burtorch_bench.op_cost      (medians of 7 runs of 200,000 ops each)
"""
import argparse
import statistics
import time

import burtorch as bt

N = 200_000
REPEATS = 7


def median_ns(fn) -> float:
    runs = []
    for _ in range(REPEATS):
        runs.append(fn())
    return statistics.median(runs) * 1e9 / N


def loop_only():
    t = time.perf_counter()
    for _ in range(N):
        pass
    return time.perf_counter() - t


def float_add():
    x, y = 1.0, 2.0
    t = time.perf_counter()
    for _ in range(N):
        x + y
    return time.perf_counter() - t


def value_op(make):
    def run():
        a, b = bt.Value(1.0), bt.Value(2.0)
        cp = bt.checkpoint()
        f = make
        t = time.perf_counter()
        for _ in range(N):
            f(a, b)
        dt = time.perf_counter() - t
        bt.rewind(cp)
        return dt
    return run


def backward_per_record():
    with bt.scope():
        x = bt.Value(0.5)
        y = x
        for _ in range(N):
            y = y * 0.999999
        t = time.perf_counter()
        y.backward()
        return time.perf_counter() - t


def rewind_cost():
    cp = bt.checkpoint()
    bt.Value(1.0)  # one node above the checkpoint, so every rewind has something to discard
    t = time.perf_counter()
    for _ in range(N):
        bt.rewind(cp)
    return time.perf_counter() - t


def main(argv=None):
    argparse.ArgumentParser(prog="python -m burtorch_bench.op_cost",
                            description=f"What one scalar op costs from Python, in ns: medians of {REPEATS} "
                                        f"runs of {N:,} ops, the empty loop's cost subtracted where "
                                        "marked *. Takes no options.").parse_args(argv)
    base = median_ns(loop_only)
    rows = [
        ("empty Python for-loop iteration", base, False),
        ("float + float (plain Python)", median_ns(float_add), True),
        ("Value + Value", median_ns(value_op(lambda a, b: a + b)), True),
        ("Value * 0.5 (immediate constant)", median_ns(value_op(lambda a, b: a * 0.5)), True),
        ("Value.tanh()", median_ns(value_op(lambda a, b: a.tanh())), True),
        ("bt.reduce_sum([a, b])", median_ns(value_op(lambda a, b: bt.reduce_sum([a, b]))), True),
        ("backward, per scalar record (native sweep)", median_ns(backward_per_record), False),
        ("bt.rewind(cp)", median_ns(rewind_cost), True),
    ]
    print(f"{'operation':45s} {'ns':>8s}  (medians of {REPEATS} x {N:,}; loop overhead subtracted where marked *)")
    for name, ns, minus_loop in rows:
        shown = ns - base if minus_loop else ns
        print(f"{name:45s} {shown:8.1f}{' *' if minus_loop else ''}")


if __name__ == "__main__":
    main()
