"""Partial gradients from recorded programs: MiniGPT.paper() (FP32), a batch of b samples through
grad_oracle-style replay of a program traced with wrt = the LM head only, against the same replay
of the full program (every parameter). Medians of --reps, both in this process, alternating.

    taskset -c 0 python -m burtorch.bench.partial_grad [--batch 64] [--reps 15]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m burtorch.bench.partial_grad")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    import burtorch as bt
    from burtorch.nn import MiniGPT
    from burtorch.oracle_compiled import sample_program

    bt.manual_seed(0)
    model = MiniGPT.paper(dtype=bt.float32)
    r = random.Random(0)
    batch = [([r.randrange(65) for _ in range(8)], [r.randrange(65) for _ in range(8)]) for _ in range(args.batch)]
    head = [model.head.weight, model.head.bias]
    full, part = sample_program(model, batch[0]), sample_program(model, batch[0], wrt=head)
    ids = np.asarray([i + t for i, t in batch], dtype=np.int64)
    X = np.zeros((len(batch), 0))
    values = np.empty(len(batch))

    def run(prog):
        out = np.zeros(prog.num_wrt)
        t = time.perf_counter()
        prog._replay(X, ids, "sum", 1.0 / len(batch), values, out)
        return time.perf_counter() - t, out

    tf, tp = [], []
    for _ in range(args.reps):
        tf.append(run(full)[0])
        tp.append(run(part)[0])
    gf, gp = run(full)[1], run(part)[1]
    assert np.array_equal(gf[-gp.size:], gp), "the head's gradient differs between the programs"
    mf, mp = statistics.median(tf), statistics.median(tp)
    print(f"MiniGPT.paper() FP32, b={len(batch)}: records {len(full)}; swept full {full.swept}, head only {part.swept}")
    print(f"full gradient  : {1e3 * mf:.3f} ms per batch (median of {args.reps})")
    print(f"head only      : {1e3 * mp:.3f} ms per batch; ratio {mp / mf:.2f} of the full sweep; head grads equal")


if __name__ == "__main__":
    main()
