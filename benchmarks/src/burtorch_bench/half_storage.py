"""bfloat16 / float16 storage against float32 for the paper's GPT (W5): memory and validation loss.

    python -m burtorch_bench.half_storage [--data tinyshakespeare] [--steps 3000] [--batch 32]

Three measurements per dtype, side by side:

1. arena bytes of one training step's graph (MiniGPT.paper(), one batch, loss and backward, in a
   fresh arena): values + grads + records + args (what the dtype changes, and the records it
   does not), plus the optimizer's state (float64 buffers; for the half dtypes also their float32
   master copy), and the per-node bookkeeping every dtype pays alike (generation, sweep bound, pins);
2. peak RSS of a whole `burtorch train gpt --dtype D` process of a few steps (getrusage);
3. the final validation loss of `burtorch train gpt --dtype D --steps S` (same seed, same data,
   same batches), the criterion being |loss(half) - loss(float32)| <= 0.05.

The processes are run alternately per dtype (float32 first), one at a time; on a shared host the
times vary, the losses and bytes do not.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile

from burtorch.cli.arguments import positive_int

from .train_memory import peak_rss_mb

DTYPES = ("float32", "bfloat16", "float16")


def step_graph_bytes(dtype_name: str, batch: int, optimizer: str) -> dict[str, int]:
    """Bytes of one step's graph in a fresh arena of dtype_name, by category."""
    import burtorch as bt
    from burtorch.nn import MiniGPT
    from burtorch.optim import SGD, AdamW

    dt = getattr(bt, dtype_name)
    arena = bt.Arena(dt)
    with arena:
        model = MiniGPT.paper(vocab=65, dtype=dt)
        opt = SGD(model.parameters(), lr=0.1) if optimizer == "sgd" else AdamW(model.parameters(), lr=3e-3)
        r = random.Random(0)
        samples = [([r.randrange(65) for _ in range(8)], [r.randrange(65) for _ in range(8)]) for _ in range(batch)]
        loss = model.loss_batch(samples)
        loss.backward()
        opt.step()
        b = arena.stats()["bytes"]
        # float64 buffers (SGD: none, AdamW: two), then for the half dtypes the float32 master
        # copy, which state_dict() lists as float64 numbers but which is kept at 4 bytes each.
        master = model.num_parameters() if dtype_name in ("bfloat16", "float16") else 0
        state = 8 * (len(opt.state_dict()["buffers"]) - master) + 4 * master
    return {
        "values+grads": b["values"] + b["grads"],
        "records+args": b["records"] + b["args"],
        "optimizer state": state,
        "per-node bookkeeping": b["generations"] + b["sweep_bounds"] + b["pins"],
    }


def final_val_loss(cmd: list[str]) -> float:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = re.search(r"final validation loss (\d+\.\d+)", out)
    if not m:
        raise RuntimeError(f"no final validation loss in the output of {' '.join(cmd)}")
    return float(m.group(1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.half_storage", description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="tinyshakespeare", help="a data set name or file (default: tinyshakespeare)")
    ap.add_argument("--steps", type=positive_int, default=3000, help="training steps of the loss runs")
    ap.add_argument("--batch", type=positive_int, default=32, help="samples per step")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    ap.add_argument("--rss-steps", type=positive_int, default=20, help="steps of the peak-RSS processes")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated, float32 first")
    args = ap.parse_args(argv)
    dtypes = [d for d in args.dtypes.split(",") if d]
    if not dtypes or dtypes[0] != "float32" or any(d not in DTYPES for d in dtypes):
        ap.error(f"--dtypes: float32 first, then any of {', '.join(DTYPES[1:])}")

    print(f"one step's graph: MiniGPT.paper() (46,289 parameters), batch {args.batch}, {args.optimizer}")
    graphs = {d: step_graph_bytes(d, args.batch, args.optimizer) for d in dtypes}
    cats = list(graphs["float32"])
    print(f"{'bytes':28s}" + "".join(f"{d:>14s}" for d in dtypes))
    for c in cats:
        print(f"{c:28s}" + "".join(f"{graphs[d][c]:14,d}" for d in dtypes))
    for d in dtypes[1:]:
        pa = sum(graphs[d][c] for c in cats[:3]) / sum(graphs["float32"][c] for c in cats[:3])
        total = sum(graphs[d].values()) / sum(graphs["float32"].values())
        print(f"{d} / float32: parameters + activations (values, grads, records, optimizer state) "
              f"{pa:.1%}; everything in the arena, bookkeeping included, {total:.1%}")

    scratch = tempfile.mkdtemp(prefix="half_storage-")
    base = [sys.executable, "-m", "burtorch", "train", "gpt", "--data", args.data, "--batch", str(args.batch),
            "--optimizer", args.optimizer, "--sample", "0", "--plan", "eager chunk=32",
            "--save", os.path.join(scratch, "run.ckpt")]
    rss = {}
    for d in dtypes:
        rss[d] = peak_rss_mb(base + ["--dtype", d, "--steps", str(args.rss_steps), "--eval-every",
                                     str(args.rss_steps), "--eval-samples", "32"])
    print("peak RSS of a whole `burtorch train gpt` process: " +
          ", ".join(f"{d} {rss[d]:.1f} MB ({rss[d] / rss['float32']:.1%})" for d in dtypes))

    losses = {}
    for d in dtypes:
        losses[d] = final_val_loss(base + ["--dtype", d, "--steps", str(args.steps)])
    print(f"final validation loss after {args.steps} steps: " + ", ".join(f"{d} {losses[d]:.4f}" for d in dtypes))
    ok = True
    for d in dtypes[1:]:
        gap = losses[d] - losses["float32"]
        ok &= abs(gap) <= 0.05
        print(f"{d} - float32: {gap:+.4f} ({'within' if abs(gap) <= 0.05 else 'NOT within'} 0.05)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
