"""GD, PAGE, EF21 and MARINA on one problem: L2-regularised logistic regression, split over workers.

Distributed methods are compared by what each worker sends (floats and bits per worker), PAGE
(a single-node method) by per-sample gradients evaluated, all by ||grad f(x)||^2 on the full
data (what the papers' theorems bound). Step sizes are the papers' theoretical ones, computed
from smoothness constants estimated here by power iteration: no tuning.

    python examples/research_optimizers.py [--workers 10] [--per-worker 40] [--dim 20] [--k 2]
                                           [--budget 100] [--lr-scale 1] [--plot curves.png]

--budget is in full-gradient rounds of GD (one round = dim floats per worker, or N sample grads).
"""
from __future__ import annotations

import argparse
import math
import random
import time

import burtorch as bt
from burtorch.nn import Module
from burtorch.optim import EF21, GD, MARINA, PAGE, RandK, RandomDithering, TopK

LAMBDA = 0.01  # L2 regularisation (makes f strongly convex)


class LogisticRegression(Module):
    """f_j(w) = log(1 + exp(-y_j a_j.w)) + LAMBDA/2 ||w||^2, from range ops and scalar ops."""

    dtype = bt.float64

    def __init__(self, dim):
        super().__init__()
        self.param("w", dim)

    def loss(self, a, y):
        margin = bt.dot(bt.leaves(a, dtype=bt.float64), self.w) * y
        return (-margin).softplus() + bt.dot(self.w, self.w) * (LAMBDA / 2)


def make_shards(workers, per_worker, dim, seed):
    """Heterogeneous shards: worker i's features are shifted by its own random mean."""
    rng = random.Random(seed)
    w_true = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    shards = []
    for _ in range(workers):
        shift = [rng.gauss(0.0, 1.0) for _ in range(dim)]
        shard = []
        for _ in range(per_worker):
            a = [rng.gauss(0.0, 1.0) + s for s in shift]
            p = 1.0 / (1.0 + math.exp(-sum(x * w for x, w in zip(a, w_true)) / math.sqrt(dim)))
            shard.append((a, 1.0 if rng.random() < p else -1.0))
        shards.append(shard)
    return shards


def smoothness(samples, dim, iters=100):
    """L of the mean loss over `samples`: lambda_max(sum a a^T) / (4 N) + LAMBDA, by power iteration."""
    v = [1.0] * dim
    top = 0.0
    for _ in range(iters):
        u = [0.0] * dim
        for a, _ in samples:
            s = sum(x * y for x, y in zip(a, v))
            u = [ui + s * x for ui, x in zip(u, a)]
        top = math.sqrt(sum(x * x for x in u))
        v = [x / top for x in u]
    return top / (4 * len(samples)) + LAMBDA


def grad_norm_sq(model, data):
    bt.grad_oracle(model, data)
    return sum(g * g for g in model.parameter_vector().grad)


def run(method, data, stop, every=1):
    """Steps `method` until stop(method); records (floats, bits, sample grads, loss, ||grad||^2)."""
    curve = [(0, 0, 0, bt.optim.mean_loss(method.model, data), grad_norm_sq(method.model, data))]
    while not stop(method):
        method.step()
        if method.steps % every == 0 or stop(method):
            curve.append((method.floats_sent, method.bits_sent, method.sample_grads,
                          bt.optim.mean_loss(method.model, data), grad_norm_sq(method.model, data)))
    return curve


def value_at(curve, column, budget):
    """The last record whose cost in `column` is within budget."""
    within = [r for r in curve if r[column] <= budget]
    return within[-1] if within else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--per-worker", type=int, default=40)
    ap.add_argument("--dim", type=int, default=20)
    ap.add_argument("--k", type=int, default=2, help="coordinates kept by Top-k / Rand-k")
    ap.add_argument("--budget", type=int, default=100, help="in GD rounds (see the module docstring)")
    ap.add_argument("--page-batch", type=int, default=8)
    ap.add_argument("--lr-scale", type=float, default=1.0,
                    help="multiply every theoretical step size (the papers' experiments tune such multipliers)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default=None, help="save the curves to this image (needs matplotlib)")
    args = ap.parse_args(argv)

    d, n = args.dim, args.workers
    shards = make_shards(n, args.per_worker, d, args.seed)
    data = [s for shard in shards for s in shard]
    L = smoothness(data, d)
    L_tilde = math.sqrt(sum(smoothness(shard, d) ** 2 for shard in shards) / n)  # sqrt(mean L_i^2)
    # PAGE needs average smoothness over single samples: L_j = ||a_j||^2 / 4 + LAMBDA.
    L_avg = math.sqrt(sum((sum(x * x for x in a) / 4 + LAMBDA) ** 2 for a, _ in data) / len(data))
    print(f"logistic regression: d={d}, {n} workers x {args.per_worker} samples; "
          f"L={L:.4g}, L~={L_tilde:.4g}, L_avg={L_avg:.4g}")

    seeds = iter(range(args.seed + 1, args.seed + 100))
    topk = TopK(d, args.k)
    randk = RandK(d, args.k, seed=next(seeds))
    dither = RandomDithering(d, s=4, seed=next(seeds))
    # EF21 (Thm 1): lr = 1 / (L + L~ sqrt(beta/theta)), theta = 1 - sqrt(1 - alpha), beta = (1 - alpha)/theta.
    theta = 1 - math.sqrt(1 - topk.alpha)
    beta = (1 - topk.alpha) / theta
    lr_ef21 = 1 / (L + L_tilde * math.sqrt(beta / theta))

    def marina(q):
        p = min(1.0, q.bits / (32 * d))
        lr = args.lr_scale / (L + L_tilde * math.sqrt((1 - p) * q.omega / (p * n)))  # MARINA (Thm 2.1)
        return MARINA(LogisticRegression(d), shards, lr, q, p=p, seed=next(seeds))

    budget_floats = args.budget * d
    scale = args.lr_scale
    distributed = [
        ("GD", GD(LogisticRegression(d), shards, scale / L)),
        (f"EF21 Top-{args.k}", EF21(LogisticRegression(d), shards, scale * lr_ef21, topk)),
        (f"MARINA Rand-{args.k}", marina(randk)),
        ("MARINA dithering s=4", marina(dither)),
    ]
    curves = {}
    t0 = time.perf_counter()
    for name, method in distributed:
        # Dithering sends 1 float but ~3 bits per coordinate: stop all methods at the same bit budget.
        curves[name] = run(method, data, lambda m: m.bits_sent >= budget_floats * 32)
    b = args.page_batch
    p_page = b / (len(data) + b)  # PAGE's choice p = b / (B + b), B = N (full gradients)
    lr_page = scale / (L + L_avg * math.sqrt((1 - p_page) / (p_page * b)))  # PAGE (Thm 1)
    page = PAGE(LogisticRegression(d), data, lr=lr_page, batch_size=b, p=p_page, seed=next(seeds))
    budget_samples = args.budget * len(data)
    curves["PAGE"] = run(page, data, lambda m: m.sample_grads >= budget_samples, every=max(1, len(data) // b))
    elapsed = time.perf_counter() - t0

    print("\nstep sizes: " + ", ".join(f"{name} {m.lr:.4g}" for name, m in distributed + [("PAGE", page)])
          + f"; MARINA p: Rand-{args.k} {distributed[2][1].p:.3g}, dithering {distributed[3][1].p:.3g}; "
          f"PAGE p={page.p:.3g} b={b}")

    fractions = (0.05, 0.1, 0.25, 0.5, 1.0)
    print("\n||grad f(x)||^2 when each worker has sent this many bits (x 32 = floats for GD)")
    print(f"{'method':<22}" + "".join(f"{int(f * budget_floats * 32):>12,d}" for f in fractions))
    for name, _ in distributed:
        row = [value_at(curves[name], 1, f * budget_floats * 32) for f in fractions]
        print(f"{name:<22}" + "".join(f"{r[4]:>12.3e}" for r in row))
    print("\n||grad f(x)||^2 after this many per-sample gradients")
    print(f"{'method':<22}" + "".join(f"{int(f * budget_samples):>12,d}" for f in fractions))
    for name in ("GD", "PAGE"):
        row = [value_at(curves[name], 2, f * budget_samples) for f in fractions]
        print(f"{name:<22}" + "".join(f"{r[4]:>12.3e}" if r else f"{'-':>12}" for r in row))
    print("\nfinal loss: " + ", ".join(f"{name} {c[-1][3]:.6f}" for name, c in curves.items())
          + f"   ({elapsed:.1f} s)")

    if args.plot:
        try:
            import matplotlib
        except ImportError:
            print("matplotlib is not installed: no plot")
            return
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        for name, _ in distributed:
            c = curves[name]
            left.semilogy([r[1] / 32 for r in c], [r[4] for r in c], label=name)
        left.set(xlabel="bits sent per worker / 32", ylabel="||grad f(x)||^2", title="communication")
        for name in ("GD", "PAGE"):
            c = curves[name]
            right.semilogy([r[2] for r in c], [r[4] for r in c], label=name)
        right.set(xlabel="per-sample gradients", title="oracle calls")
        for ax in (left, right):
            ax.legend()
            ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"plot saved to {args.plot}")


if __name__ == "__main__":
    main()
