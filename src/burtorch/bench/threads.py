"""One thread against two, side by side in one process: single range records at the sizes of the
W4/W5 steps (where the split thresholds come from), then whole training steps (grad_oracle + SGD)
of W4 and W5: chunked, compiled per sample, and compiled per chunk (chunks of min(b, 64) / threads
samples, so that each thread replays its own). Each line alternates the two counts run by run and prints
medians, the speed-up and the CPU time per wall time of the two-thread runs (near 2 when both
threads work; other processes on the machine lower it, so the header prints the load average).

    python -m burtorch.bench.threads [--reps 15] [--only ops|steps]

Speed figures are meaningful only on an otherwise idle machine; a spinning helper that the OS
time-slices against another process makes a parallel region start late.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def side_by_side(step, reps: int, per_run: int) -> tuple[float, float, float]:
    """(median ms at 1 thread, median ms at 2, CPU / wall at 2), runs alternating."""
    import burtorch as bt

    times: dict[int, list[float]] = {1: [], 2: []}
    load: list[float] = []
    for t in (1, 2):
        bt.set_num_threads(t)
        for _ in range(3):
            step(t)
    for _ in range(reps):
        for t in (1, 2):
            bt.set_num_threads(t)
            c0, w0 = _cpu(), time.perf_counter()
            for _ in range(per_run):
                step(t)
            wall = time.perf_counter() - w0
            times[t].append(wall / per_run)
            if t == 2:
                load.append((_cpu() - c0) / wall)
    m1, m2 = statistics.median(times[1]) * 1e3, statistics.median(times[2]) * 1e3
    return m1, m2, statistics.median(load)


def _header(what: str, unit: str) -> None:
    print(f"{what:<34} {'1 thread ' + unit:>12} {'2 threads ' + unit:>13} {'speed-up':>9} {'cpu/wall':>9}")


def ops(reps: int) -> None:
    import numpy as np

    import burtorch as bt

    rng = np.random.default_rng(0)

    def leaves(*shape):
        return bt.leaves(rng.uniform(-1, 1, shape).astype(np.float32), shape=shape, dtype=bt.float32)

    _header("record (forward + backward)", "us")
    cases: list[tuple[str, Callable[[], Any]]] = []
    for rows, n_in, n_out in ((64, 1024, 1024), (64, 1024, 128), (64, 1024, 64), (1, 1024, 1024), (512, 24, 96),
                              (512, 96, 24), (64, 24, 96), (8, 24, 96)):
        x, W, b = leaves(rows, n_in), leaves(n_out, n_in), leaves(n_out)
        cases.append((f"linear {rows}x{n_in} -> {n_out}", partial(bt.linear, x, W, b)))
    for seqs in (64, 8):
        qkv = leaves(seqs * 8, 72)
        cases.append((f"multi_head_attention {seqs} x 8 x 72",
                      partial(bt.multi_head_attention, qkv, 6, True, sequences=seqs)))
    for rows in (512, 64):
        x, g, beta = leaves(rows, 24), leaves(24), leaves(24)
        cases.append((f"layer_norm {rows} x 24", partial(bt.layer_norm, x, g, beta)))
        z = leaves(rows, 65)
        cases.append((f"cross_entropy {rows} x 65", partial(bt.cross_entropy, z, [i % 65 for i in range(rows)])))
    for n in (64 * 1024, 512 * 96, 64 * 128):
        v = leaves(n)
        cases.append((f"tanh over {n}", v.tanh))
    cp = bt.current_arena(bt.float32).checkpoint()
    for name, make in cases:
        def step(_t, make=make):
            y = make()
            (bt.vsum(y) if isinstance(y, bt.Vector) else y).backward()
            bt.rewind(cp)

        m1, m2, load = side_by_side(step, reps, 20)
        print(f"{name:<34} {1e3 * m1:>12.1f} {1e3 * m2:>13.1f} {m1 / m2:>8.2f}x {load:>9.2f}", flush=True)


def steps(reps: int) -> None:
    import burtorch as bt
    from burtorch import nn
    from burtorch.optim import SGD

    _header("training step (oracle + SGD, or SGD.fused_step)", "ms")
    r = random.Random(0)
    for workload, e, b, mode in (("W4", 64, 64, "chunk"), ("W4", 64, 64, "compiled-chunk"), ("W4", 64, 64, "fused"),
                                 ("W4", 128, 64, "chunk"), ("W4", 128, 64, "compiled-chunk"), ("W4", 128, 64, "fused"),
                                 ("W4", 512, 64, "chunk"), ("W4", 512, 64, "compiled-chunk"), ("W4", 512, 64, "fused"),
                                 ("W4", 1024, 64, "chunk"), ("W4", 1024, 64, "compiled-chunk"),
                                 ("W4", 1024, 64, "fused"), ("W4", 1024, 1, "eager"), ("W4", 1024, 1, "fused"),
                                 ("W5", 0, 8, "chunk"), ("W5", 0, 8, "compiled"),
                                 ("W5", 0, 64, "chunk"), ("W5", 0, 64, "compiled"), ("W5", 0, 64, "compiled-chunk")):
        bt.manual_seed(0)
        model: Any
        batches: list[Any]
        if workload == "W4":
            model = nn.MakemoreMLP.paper(hidden=e, vocab=27, dtype=bt.float32)
            batches = [[([r.randrange(27) for _ in range(16)], r.randrange(27)) for _ in range(b)] for _ in range(8)]
        else:
            model = nn.MiniGPT.paper(vocab=65, dtype=bt.float32)
            batches = [[([r.randrange(65) for _ in range(8)], [r.randrange(65) for _ in range(8)]) for _ in range(b)]
                       for _ in range(8)]
        opt = SGD(model.parameters(), lr=0.01)
        # compiled-chunk: chunks of min(b, 64) / t samples, so each of t threads replays its own
        kw = {"chunk": min(b, 64)} if mode == "chunk" else ({"compile": True} if mode == "compiled" else {})
        cursor = [0]

        def step(t, model=model, opt=opt, batches=batches, kw=kw, cursor=cursor, mode=mode, b=b):
            cursor[0] += 1
            batch = batches[cursor[0] % len(batches)]
            if mode == "fused":  # one graph, the SGD update inside the sweep (SGD.fused_step)
                opt.fused_step(model, batch, chunk=min(b, 64), threads=t)
                return
            extra = {"compile": True, "chunk": max(1, min(b, 64) // t)} if mode == "compiled-chunk" else kw
            bt.grad_oracle(model, batch, threads=t, **extra)
            opt.step()

        m1, m2, load = side_by_side(step, reps, 4)
        name = f"{workload} {f'e={e} ' if e else ''}b={b} {mode}"
        print(f"{name:<34} {m1:>12.3f} {m2:>13.3f} {m1 / m2:>8.2f}x {load:>9.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch.bench.threads", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=15, help="alternating runs per line (median reported)")
    ap.add_argument("--only", choices=("ops", "steps"))
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    import burtorch as bt

    if bt._core._allowed_cores() < 2:
        print("this process may use one core: nothing to compare", file=sys.stderr)
        return 1
    print(f"# one vs two threads, medians of {args.reps} alternating runs; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; build: {bt.build_info}")
    if args.only in (None, "ops"):
        ops(args.reps)
    if args.only in (None, "steps"):
        steps(args.reps)
    print(f"# load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
