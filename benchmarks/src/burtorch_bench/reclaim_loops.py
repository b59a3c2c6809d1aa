"""Loops written as in micrograd, without rewinds: peak RSS (from the OS) and time (issue 43).

    python -m burtorch_bench.reclaim_loops [--steps 100] [--repeats 3]

micrograd 0.1.0's demo (moons, MLP 2-16-16-1, SVM loss with L2, full batch, lr 1 - 0.9 k/steps),
once with micrograd's own Value and once with ``burtorch.Value`` dropped into ``micrograd.nn``.
Each run is a fresh process, alternated across repeats; the losses of every step are compared
(bit for bit, and the largest difference). The moons are a small deterministic generator (no sklearn needed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = r"""
import json, math, random, resource, sys, time
engine, steps = sys.argv[1], int(sys.argv[2])
import micrograd.nn as mn
if engine == "burtorch":
    import burtorch
    mn.Value = burtorch.Value
Value = mn.Value

def moons(n, noise, seed):
    rng = random.Random(seed)
    xs, ys = [], []
    for i in range(n):
        t = math.pi * (i % (n // 2)) / (n // 2 - 1)
        if i < n // 2:
            x, y, lab = math.cos(t), math.sin(t), 1
        else:
            x, y, lab = 1 - math.cos(t), 0.5 - math.sin(t), -1
        xs.append([x + rng.gauss(0, noise), y + rng.gauss(0, noise)])
        ys.append(lab)
    return xs, ys

random.seed(1337)
X, y = moons(100, 0.1, 1337)
model = mn.MLP(2, [16, 16, 1])

def loss():
    inputs = [list(map(Value, row)) for row in X]
    scores = list(map(model, inputs))
    losses = [(1 + -yi * si).relu() for yi, si in zip(y, scores)]
    data_loss = sum(losses) * (1.0 / len(losses))
    reg_loss = 1e-4 * sum((p * p for p in model.parameters()))
    return data_loss + reg_loss

out = []
t0 = time.perf_counter()
for k in range(steps):
    total_loss = loss()
    model.zero_grad()
    total_loss.backward()
    lr = 1.0 - 0.9 * k / steps
    for p in model.parameters():
        p.data -= lr * p.grad
    out.append(total_loss.data)
dt = time.perf_counter() - t0
print(json.dumps({"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "seconds": dt,
                  "losses": [float(v).hex() for v in out]}))
"""


def run(engine: str, steps: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, engine, str(steps)], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m burtorch_bench.reclaim_loops", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    results: dict[str, list[dict]] = {"micrograd": [], "burtorch": []}
    for _ in range(args.repeats):  # alternated: both engines see the same host load
        for engine in results:
            results[engine].append(run(engine, args.steps))
    same = results["micrograd"][0]["losses"] == results["burtorch"][0]["losses"]
    diff = max(abs(float.fromhex(a) - float.fromhex(b))
               for a, b in zip(results["micrograd"][0]["losses"], results["burtorch"][0]["losses"]))
    for engine, rs in results.items():
        print(f"{engine:<10} peak RSS {statistics.median(r['rss_mb'] for r in rs):7.1f} MB   "
              f"time {statistics.median(r['seconds'] for r in rs):8.3f} s   (median of {len(rs)})")
    print(f"losses identical bit for bit: {same}   (largest difference {diff:.3g})")


if __name__ == "__main__":
    main()
