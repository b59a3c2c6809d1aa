"""The default problem: logistic regression with a non-convex regulariser, as in the experiments
of the EF21 and MARINA papers,

    f_i(x) = (1/m_i) sum_j log(1 + exp(-y_j a_j^T x)) + lam sum_k x_k^2 / (1 + x_k^2),

on a seeded synthetic data set (or a LibSVM file) split among the clients.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _core
from ..nn import Module
from ..optim import streams
from . import splits
from .problem import Problem, Smoothness
from .sparse import CSR, gram_top_eigenvalue


class LogisticModel(Module):
    dtype = _core.float64
    w: _core.Vector

    def __init__(self, dim: int, lam: float) -> None:
        super().__init__()
        self.lam = lam
        self.param("w", dim, init="normal", a=0.0, b=1.0)

    def loss_of(self, margins_matrix: np.ndarray) -> _core.Value:
        """Mean loss over rows b_j = -y_j a_j (so the loss term is softplus(b_j^T w))."""
        m, d = margins_matrix.shape
        B = _core.leaves(margins_matrix.ravel(), shape=(m, d), dtype=_core.float64)
        data = _core.vmean(_core.linear(B, self.w.reshape(1, d)).softplus())
        sq = self.w.sqr()
        return data + _core.vsum(sq / (sq + 1.0)) * self.lam


class LogisticProblem(Problem):
    """Clients' shards are matrices of rows -y_j a_j (the sign folded in once, at the split)."""

    name = "logistic"

    def __init__(self, A: np.ndarray, y: np.ndarray, n_clients: int, split: str = "label", alpha: float = 0.5,
                 lam: float = 0.1, seed: int = 0, source: str = "synthetic") -> None:
        A = np.asarray(A, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if A.ndim != 2 or len(A) != len(y):
            raise ValueError(f"A must be samples x features with one label per sample, got {A.shape} and {y.shape}")
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam!r}")
        parts = splits.split(y, n_clients, split, alpha, seed)
        super().__init__([np.ascontiguousarray(-y[p, None] * A[p]) for p in parts])
        self.dim, self.lam, self.split, self.source = A.shape[1], float(lam), split, source

    def make_model(self) -> LogisticModel:
        return LogisticModel(self.dim, self.lam)

    def accumulate(self, model: LogisticModel, shard: np.ndarray,
                   indices: Sequence[int] | np.ndarray | None = None) -> float:
        rows = shard if indices is None else shard[indices]
        params = model.parameter_vector()
        params.zero_grad()
        arena = params.arena
        cp = arena.checkpoint()
        try:
            loss = model.loss_of(rows)
            loss.backward()
            return loss.data
        finally:
            arena.rewind(cp)

    def smoothness(self) -> Smoothness:
        # softplus'' <= 1/4 and |(t^2 / (1 + t^2))''| <= 2 (at t = 0)
        reg = 2.0 * self.lam
        # The top eigenvalue of B^T B / m (d x d) is that of B B^T / m (m x m): with fewer rows than
        # features (a tiny LibSVM file with one large feature index) the smaller one is solved,
        # rows^3 instead of features^3 per client.
        local = [_top_eigenvalue(B, len(B)) / 4.0 + reg for B in self.shards]
        n, rows = len(self.shards), sum(len(B) for B in self.shards)
        if rows < self.dim:  # the mean of the B^T B / m is C^T C, C the rows scaled by 1/sqrt(n m)
            C = np.concatenate([B / np.sqrt(n * len(B)) for B in self.shards])
            L = _top_eigenvalue(C, 1) / 4.0 + reg
        else:
            L = np.linalg.eigvalsh(sum(B.T @ B / len(B) for B in self.shards) / n)[-1] / 4.0 + reg
        L_max = max(float(np.max(np.einsum("ij,ij->i", B, B))) for B in self.shards) / 4.0 + reg
        with np.errstate(over="ignore"):
            L_tilde = float(np.sqrt(np.mean(np.square(local))))
        if not all(np.isfinite(x) for x in (L, L_tilde, L_max)):
            # the theory steps would be 0 or nan: no progress, without a word
            raise ValueError(f"the smoothness constants overflow (L={L}, L_tilde={L_tilde}, L_max={L_max}): "
                             "lam or the data are too large")
        return Smoothness(float(L), L_tilde, L_max, tuple(float(v) for v in local))

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "dim": self.dim, "lam": self.lam, "split": self.split, "data": self.source}


class SparseLogisticProblem(LogisticProblem):
    """The same problem on CSR features (:class:`~burtorch.fl.sparse.CSR`): shards of rows -y_j a_j
    kept sparse, the loss and gradient by numpy products over the stored entries, O(nnz_i + d) a
    client's evaluation, and smoothness constants by power iteration, never a d x d matrix."""

    name = "logistic"

    def __init__(self, A: CSR, y: np.ndarray, n_clients: int, split: str = "label", alpha: float = 0.5,
                 lam: float = 0.1, seed: int = 0, source: str = "sparse") -> None:
        if not isinstance(A, CSR):
            raise TypeError(f"A must be a burtorch.fl.sparse.CSR, got {type(A).__name__}")
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 1 or len(A) != len(y):
            raise ValueError(f"one label per row: A has {len(A)} rows, y has shape {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("the labels must be finite")
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam!r}")
        parts = splits.split(y, n_clients, split, alpha, seed)
        Problem.__init__(self, [A.take(p).scale_rows(-y[p]) for p in parts])
        self.dim, self.lam, self.split, self.source, self.seed = A.shape[1], float(lam), split, source, seed
        self._smoothness: Smoothness | None = None

    def accumulate(self, model: LogisticModel, shard: Any,  # a CSR here
                   indices: Sequence[int] | np.ndarray | None = None) -> float:
        rows = shard if indices is None else shard.take(indices)
        params = model.parameter_vector()
        w = params.numpy("values")
        z = rows.matvec(w)
        sq = w * w
        loss = float(np.mean(np.logaddexp(0.0, z)) + self.lam * np.sum(sq / (1.0 + sq)))
        sigmoid = 0.5 * (1.0 + np.tanh(0.5 * z))  # softplus', without overflow for large |z|
        grad = rows.rmatvec(sigmoid) / len(rows) + self.lam * 2.0 * w / np.square(1.0 + sq)
        params.numpy("grads", writable=True)[:] = grad
        return loss

    def smoothness(self) -> Smoothness:
        # computed once: power iteration costs tens of passes over the data, and every method
        # bound to this problem asks
        if self._smoothness is None:
            self._smoothness = self._power_smoothness()
        return self._smoothness

    def _power_smoothness(self) -> Smoothness:
        reg = 2.0 * self.lam
        local = [gram_top_eigenvalue([B], self.seed) / 4.0 + reg for B in self.shards]
        L = gram_top_eigenvalue(self.shards, self.seed) / 4.0 + reg
        L_max = max(float(B.row_norms_sq().max()) for B in self.shards) / 4.0 + reg
        return Smoothness(float(L), float(np.sqrt(np.mean(np.square(local)))), L_max,
                          tuple(float(v) for v in local))

    def settings(self) -> dict[str, Any]:
        nnz = sum(B.nnz for B in self.shards)
        return {**super().settings(), "storage": "csr", "nnz": nnz}


def _top_eigenvalue(B: np.ndarray, m: int) -> float:
    """The largest eigenvalue of B^T B / m, from the smaller of B^T B and B B^T (they share their
    nonzero eigenvalues)."""
    gram = B @ B.T if len(B) < B.shape[1] else B.T @ B
    return float(np.linalg.eigvalsh(gram / m)[-1])


def synthetic(n_clients: int = 20, samples: int = 1000, dim: int = 30, lam: float = 0.1, split: str = "label",
              alpha: float = 0.5, seed: int = 0) -> LogisticProblem:
    """A seeded binary classification set: features N(0, I) with a per-sample scale in [0.5, 2],
    labels from a random linear rule with 10% of them flipped."""
    for name, v, lo in (("samples", samples, 1), ("dim", dim, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    rng = np.random.default_rng(streams.derive(seed, streams.DATA, 0))
    A = rng.standard_normal((samples, dim)) * rng.uniform(0.5, 2.0, (samples, 1))
    w_true = rng.standard_normal(dim)
    y = np.sign(A @ w_true + 1e-12)
    flip = rng.random(samples) < 0.1
    y[flip] = -y[flip]
    return LogisticProblem(A, y, n_clients, split, alpha, lam, seed, source=f"synthetic {samples}x{dim}")


def from_libsvm(path: str, n_clients: int, lam: float = 0.1, split: str = "label", alpha: float = 0.5,
                seed: int = 0) -> SparseLogisticProblem:
    """Logistic regression on a LibSVM file, its features kept sparse (CSR)."""
    from .libsvm import read_libsvm

    A, y = read_libsvm(path, sparse=True)
    return SparseLogisticProblem(A, y, n_clients, split, alpha, lam, seed, source=str(path))
