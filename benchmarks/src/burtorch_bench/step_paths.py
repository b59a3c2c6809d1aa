"""The ways to take one W4 training step, timed side by side in one process on one thread: the
eager fused step (SGD.fused_step), the compiled chunked oracle and SGD.step(), and the compiled
fused step (SGD.fused_step(..., compile=True)). Runs of 8 steps alternate between the three, so
the host's drift and the process's memory layout weigh on each alike; medians of the per-step
times are printed, in ms. All three take the same step (the tests compare their bits).

    python -m burtorch_bench.step_paths [--embed 64,128,512,1024] [--reps 25]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from burtorch.cli.arguments import int_list, positive_int

from .specs import random_w4_batches


def measure(e: int, reps: int) -> dict[str, float]:
    import burtorch as bt
    from burtorch import nn
    from burtorch.optim import SGD

    r = random.Random(0)
    bt.manual_seed(0)
    bt.set_num_threads(1)
    model = nn.MakemoreMLP.paper(hidden=e, vocab=27, dtype=bt.float32)
    batches = random_w4_batches(r, 64)
    opt = SGD(model.parameters(), lr=0.01)

    def compiled_chunk(batch):
        bt.grad_oracle(model, batch, threads=1, compile=True, chunk=64)
        opt.step()

    paths = {
        "fused": lambda batch: opt.fused_step(model, batch, chunk=64, threads=1),
        "compiled-chunk + step": compiled_chunk,
        "compiled-fused": lambda batch: opt.fused_step(model, batch, chunk=64, threads=1, compile=True),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for step in paths.values():  # warm-up (and the traces)
        step(batches[0])
    for _ in range(reps):
        for name, step in paths.items():
            for batch in batches:
                t0 = time.perf_counter()
                step(batch)
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.step_paths", description=__doc__.split("\n\n")[0])
    ap.add_argument("--embed", type=int_list, default=[64, 128, 512, 1024], help="W4 hidden widths, comma-separated")
    ap.add_argument("--reps", type=positive_int, default=25, help="alternating runs of 8 steps per path")
    args = ap.parse_args(argv)
    widths = args.embed
    print(f"{'W4 b=64, 1 thread':<20} {'fused ms':>10} {'compiled-chunk + step ms':>26} {'compiled-fused ms':>19}")
    for e in widths:
        m = measure(e, args.reps)
        print(f"{'e=' + str(e):<20} {m['fused']:>10.3f} {m['compiled-chunk + step']:>26.3f} "
              f"{m['compiled-fused']:>19.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
