"""Partial gradients from recorded programs: MiniGPT.paper() (FP32), a batch of b samples replayed
as grad_oracle(compile=True) replays them (forward, reverse sweep with seed 1/b, grads accumulated
over the batch into the arena), by the program traced with wrt = the LM head only and by the full
program (every parameter); also the forward alone, which bounds what a partial sweep can save.
Medians of --reps, all in this process, alternating within each repetition.

    taskset -c 0 python -m burtorch_bench.partial_grad [--batch 64] [--reps 15]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.partial_grad", description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    from array import array

    import burtorch as bt
    from burtorch.nn import MiniGPT
    from burtorch.oracle_compiled import _shape, sample_program

    bt.manual_seed(0)
    model = MiniGPT.paper(dtype=bt.float32)
    r = random.Random(0)
    batch = [([r.randrange(65) for _ in range(8)], [r.randrange(65) for _ in range(8)]) for _ in range(args.batch)]
    head = [model.head.weight, model.head.bias]
    assert all(p is not None for p in head), "MiniGPT's head has a bias"
    full, part = sample_program(model, batch[0]), sample_program(model, batch[0], wrt=head)
    shape, seed = _shape(batch[0]), 1.0 / len(batch)
    values = array("d", [0.0]) * len(batch)
    pv = model.parameter_vector()

    def run(prog, mode):
        t = time.perf_counter()
        prog._replay_samples(batch, 0, shape, mode, seed, values, None, True)
        return time.perf_counter() - t

    times: dict[str, list[float]] = {"full": [], "head": [], "forward": []}
    for _ in range(args.reps):
        times["full"].append(run(full, "arena"))
        times["head"].append(run(part, "arena"))
        times["forward"].append(run(full, "values"))
    run(full, "arena")
    grads = pv.numpy("grads")
    n_head = sum(p.size for p in head if p is not None)
    full_head = grads[-n_head:].copy()
    run(part, "arena")
    assert (grads[-n_head:] == full_head).all(), "the head's gradient differs between the programs"
    mf, mp, mv = (statistics.median(times[k]) for k in ("full", "head", "forward"))
    # ratios per repetition (its three runs back to back), then their median: robust to load
    # that drifts during the run, which would skew a ratio of medians taken over different runs
    rp = statistics.median(h / f for h, f in zip(times["head"], times["full"]))
    rv = statistics.median(v / f for v, f in zip(times["forward"], times["full"]))
    print(f"MiniGPT.paper() FP32, b={len(batch)}: records {len(full)}; swept full {full.swept}, "
          f"head only {part.swept}; medians of {args.reps}")
    print(f"full gradient  : {1e3 * mf:.3f} ms per batch")
    print(f"head only      : {1e3 * mp:.3f} ms per batch; {rp:.2f} of the full sweep; head grads equal")
    print(f"forward only   : {1e3 * mv:.3f} ms per batch; {rv:.2f} of the full sweep")


if __name__ == "__main__":
    main()
