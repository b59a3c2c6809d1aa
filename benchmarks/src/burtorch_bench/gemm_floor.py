"""How close burtorch's linear layer comes to the single-thread GEMM floor, shape by shape.

    python -m burtorch_bench.gemm_floor [--reps 7] [--only w4|w5] [--dtype float32|float64]
    taskset -c 1 python -m burtorch_bench.gemm_floor      # pinned to one core, as measured

For each linear shape of W4 (the makemore MLP: rows x 1024 -> e and rows x e -> 27, rows 1 or
64) and W5 (the miniature GPT: rows 8..512 over widths 24/72/96/65), it times

  * burtorch: one `bt.linear(x, W, b)` record over all rows, `bt.vsum` of it, `backward` and
    `rewind`, through the Python API, so the forward and the three backward products run once;
  * the floor: numpy.dot of the same three products (x W^T, gy W, gy^T x) into preallocated
    outputs, which calls the BLAS GEMM numpy links (OpenBLAS in numpy's wheels) held to one
    thread (numpy.matmul was slower: for a K = 1 product it skips BLAS),

alternating the two in one process, and prints medians over --reps runs (each run repeats the
step until it takes ~20 ms) and the floor as a percentage of burtorch's time (100 % = as fast
as the floor, above 100 % = faster). Both sides include their Python call overhead, which
dominates the smallest shapes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# BLAS libraries read their thread count when loaded: main() sets it before importing numpy.
_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

W4_EMBED = (4, 16, 32, 64, 128, 512, 1024)
W4_ROWS = (1, 64)
W4_CONTEXT_INPUTS, W4_VOCAB = 1024, 27
W5_ROWS = (8, 64, 512)
W5_LAYERS = ((24, 72, False, "qkv"), (24, 24, True, "proj"), (24, 96, True, "ff up"), (96, 24, True, "ff down"),
             (24, 65, True, "lm head"))


def shapes(only: str | None) -> list[tuple[str, int, int, int, bool]]:
    """(label, rows, in, out, bias) for every linear of the workloads."""
    out = []
    if only in (None, "w4"):
        for rows in W4_ROWS:
            for e in W4_EMBED:
                out.append((f"W4 e={e} hidden", rows, W4_CONTEXT_INPUTS, e, True))
                out.append((f"W4 e={e} logits", rows, e, W4_VOCAB, True))
    if only in (None, "w5"):
        for rows in W5_ROWS:
            for n_in, n_out, bias, name in W5_LAYERS:
                out.append((f"W5 {name}", rows, n_in, n_out, bias))
    return out


def _per_call(step, min_seconds: float = 0.02) -> int:
    """Calls per timed run so that one run lasts about min_seconds."""
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            step()
        if time.perf_counter() - t >= min_seconds or n >= 1 << 20:
            return n
        n *= 2


def measure(rows: int, n_in: int, n_out: int, bias: bool, reps: int, dtype: str) -> tuple[float, float]:
    """Median ms per layer step of burtorch and of the numpy floor, measured alternately."""
    import numpy as np

    import burtorch as bt

    rng = np.random.default_rng(0)
    np_dtype = np.float32 if dtype == "float32" else np.float64
    bt_dtype = bt.float32 if dtype == "float32" else bt.float64
    xv = rng.uniform(-1, 1, (rows, n_in)).astype(np_dtype)
    wv = rng.uniform(-1, 1, (n_out, n_in)).astype(np_dtype)
    gyv = rng.uniform(-1, 1, (rows, n_out)).astype(np_dtype)

    arena = bt.Arena(bt_dtype, 4 * (rows * n_in + n_out * n_in + rows * n_out + n_out) + 1024)
    with arena:
        x = bt.leaves(xv, shape=(rows, n_in), dtype=bt_dtype)
        W = bt.leaves(wv, shape=(n_out, n_in), dtype=bt_dtype)
        b = bt.leaves(shape=(n_out,), dtype=bt_dtype) if bias else None
        cp = bt.checkpoint()

        def burtorch_step():
            bt.vsum(bt.linear(x, W, b)).backward()
            bt.rewind(cp)

        y, gx, gw = np.empty((rows, n_out), np_dtype), np.empty((rows, n_in), np_dtype), np.empty_like(wv)
        wt, gyt = wv.T, gyv.T

        def floor_step():
            np.dot(xv, wt, out=y)
            np.dot(gyv, wv, out=gx)
            np.dot(gyt, xv, out=gw)

        n_bt, n_np = _per_call(burtorch_step), _per_call(floor_step)
        bt_runs, np_runs = [], []
        for _ in range(reps):
            t = time.perf_counter()
            for _ in range(n_bt):
                burtorch_step()
            bt_runs.append((time.perf_counter() - t) / n_bt)
            t = time.perf_counter()
            for _ in range(n_np):
                floor_step()
            np_runs.append((time.perf_counter() - t) / n_np)
    return statistics.median(bt_runs) * 1e3, statistics.median(np_runs) * 1e3


def _blas_name() -> str:
    import numpy as np

    try:
        info = np.show_config(mode="dicts")
        blas = info.get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy: no dict mode
        return "numpy's BLAS"


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    # Too late if numpy is in already (a caller imported it): then say so in the header.
    blas_pinned = "numpy" not in sys.modules or all(os.environ.get(v) == "1" for v in _THREAD_VARS)
    for v in _THREAD_VARS:
        os.environ[v] = "1"

    p = argparse.ArgumentParser(prog="python -m burtorch_bench.gemm_floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=7, help="timed runs per shape (median reported)")
    p.add_argument("--only", choices=("w4", "w5"), help="only one workload's shapes")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--max-shapes", type=int, default=None, help="stop after this many shapes (smoke runs)")
    args = p.parse_args(args_list)
    if args.reps < 1:
        p.error("--reps must be at least 1")

    import burtorch as bt

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    print(f"# burtorch linear (forward + backward, one record) vs the {args.dtype} GEMM floor "
          f"({_blas_name()}, {'one thread' if blas_pinned else 'THREADS NOT PINNED: numpy was imported first'}); "
          f"medians of {args.reps} runs; cpus {cpus}")
    print(f"# build: {bt.build_info}")
    header = f"{'shape':<18} {'rows':>5} {'in':>5} {'out':>5} {'burtorch ms':>12} {'floor ms':>10} {'% of floor':>11}"
    print(header)
    print("-" * len(header))
    total_bt = total_np = 0.0
    todo = shapes(args.only)[: args.max_shapes]
    for label, rows, n_in, n_out, bias in todo:
        ms_bt, ms_np = measure(rows, n_in, n_out, bias, args.reps, args.dtype)
        total_bt, total_np = total_bt + ms_bt, total_np + ms_np
        print(f"{label:<18} {rows:>5} {n_in:>5} {n_out:>5} {ms_bt:>12.4f} {ms_np:>10.4f} {100 * ms_np / ms_bt:>10.0f}%",
              flush=True)
    print("-" * len(header))
    print(f"{'all shapes':<36} {total_bt:>12.4f} {total_np:>10.4f} {100 * total_np / total_bt:>10.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
