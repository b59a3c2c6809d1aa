"""Client sampling by importance: client i takes part in a round on its own coin of probability
p_i ∝ L_i (its smoothness constant), capped at 1, with sum_i p_i = participation * n clients
expected per round (Chen, Horváth, Richtárik 2020, "Optimal client sampling for federated
learning"; independent sampling in Tyurin, Sun, Burlachenko, Richtárik 2022).

The methods that average their participants' messages (gd, dcgd, fedavg) reweight them,

    g = (1/n) sum_{i in S} m_i / p_i,

which is unbiased: E g = (1/n) sum_i m_i. Its variance for exact gradients is
(1/n^2) sum_i (1 - p_i)/p_i ||grad f_i||^2 <= 2 A (f(x) - f_inf) + 2 A D_inf with

    A = max_i L_i (1 - p_i) / (n p_i),

(each f_i being L_i-smooth and bounded below), so gradient descent with this g satisfies the
ABC condition with B = 1, and Khaled & Richtárik (2020, "Better theory for SGD in the nonconvex
world", Corollary 1) give the step for T rounds

    lr = min(1 / L, 1 / sqrt(L A T))                                  (:func:`importance_lr`).

With p_i ∝ L_i, L_i (1 - p_i) / (n p_i) = (1 - p_i) mean(L) / tau: A follows the MEAN of the L_i
where uniform sampling (p_i = tau/n) has their maximum, hence the larger step. EF21-PP does not
reweight (its g tracks the mean of the clients' g_i); client i's error contracts by 1 - p_i alpha,
so its theory step is EF21's with alpha -> min_i p_i alpha.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["importance_probabilities", "importance_lr"]


def importance_probabilities(L_local: Sequence[float], expected: float) -> tuple[float, ...]:
    """p_i ∝ L_i with sum p_i = ``expected``, any p_i above 1 capped at 1 and the rest shared
    again among the others in proportion to their L_i."""
    L = np.asarray(L_local, dtype=np.float64)
    n = len(L)
    if L.ndim != 1 or n == 0 or not np.all(np.isfinite(L)) or not np.all(L > 0):
        raise ValueError("importance sampling needs a positive finite smoothness constant L_i per client")
    if not 0 < expected <= n:
        raise ValueError(f"the expected number of participants must be in (0, {n}], got {expected!r}")
    capped = np.zeros(n, dtype=bool)
    p = np.ones(n)
    while True:
        free = ~capped
        p[free] = (expected - capped.sum()) * L[free] / L[free].sum()
        over = free & (p > 1.0)
        if not over.any():
            break
        capped |= over
        p[capped] = 1.0
    return tuple(float(v) for v in np.minimum(p, 1.0))


def importance_lr(L: float, L_local: Sequence[float], probabilities: Sequence[float], rounds: int) -> float:
    """The step of gradient descent with the reweighted estimate for ``rounds`` rounds:
    min(1/L, 1/sqrt(L A T)), A = max_i L_i (1 - p_i) / (n p_i) (see the module's docstring)."""
    n = len(L_local)
    if len(probabilities) != n:
        raise ValueError(f"{len(probabilities)} probabilities for {n} clients")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    A = max(Li * (1.0 - p) / (n * p) for Li, p in zip(L_local, probabilities))
    return 1.0 / L if A <= 0.0 else min(1.0 / L, 1.0 / math.sqrt(L * A * rounds))
