"""Compressed sparse rows (CSR) for the LibSVM data sets of federated research (rcv1: d = 47,236;
news20.binary: d = 1,355,191), in numpy alone: memory O(nnz + rows), products O(nnz + d).

A small class of our own rather than scipy.sparse: the clients need four operations (rows, A w,
A^T s, row norms), and scipy would be a large dependency for them.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..optim import streams


class CSR:
    """A rows x cols matrix: row r's column indices are ``indices[indptr[r]:indptr[r + 1]]``
    (strictly increasing) with values ``data[...]`` at the same positions."""

    __slots__ = ("indptr", "indices", "data", "shape", "_rows")

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int]) -> None:
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(indices, dtype=np.int64)
        self.data = np.ascontiguousarray(data, dtype=np.float64)
        m, d = int(shape[0]), int(shape[1])
        self.shape = (m, d)
        if self.indptr.shape != (m + 1,) or self.indptr[0] != 0 or np.any(np.diff(self.indptr) < 0):
            raise ValueError(f"indptr must be {m + 1} non-decreasing offsets from 0")
        if len(self.indices) != self.indptr[-1] or len(self.data) != self.indptr[-1]:
            raise ValueError(f"indices and data must hold indptr[-1] = {int(self.indptr[-1])} entries")
        if len(self.indices) and (self.indices.min() < 0 or self.indices.max() >= d):
            raise ValueError(f"column indices must lie in [0, {d})")
        if not np.all(np.isfinite(self.data)):
            raise ValueError("the matrix has non-finite values")
        self._rows: np.ndarray | None = None

    @classmethod
    def from_dense(cls, A: np.ndarray) -> CSR:
        A = np.asarray(A, dtype=np.float64)
        if A.ndim != 2:
            raise ValueError(f"expected a matrix, got shape {A.shape}")
        r, c = np.nonzero(A)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=A.shape[0]))])
        return cls(indptr, c, A[r, c], A.shape)

    @property
    def nnz(self) -> int:
        return len(self.data)

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    def __len__(self) -> int:
        return self.shape[0]

    def row_ids(self) -> np.ndarray:
        """The row of every stored entry (kept once computed: the products need it)."""
        if self._rows is None:
            self._rows = np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))
        return self._rows

    def take(self, rows: Sequence[int] | np.ndarray) -> CSR:
        """The submatrix of these rows, in this order."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or (len(rows) and (rows.min() < 0 or rows.max() >= self.shape[0])):
            raise IndexError(f"row indices must be a 1-d array in [0, {self.shape[0]})")
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        # positions start_r, start_r + 1, ..., end_r - 1 for every chosen row r, in one vector
        pos = np.arange(indptr[-1], dtype=np.int64) - np.repeat(indptr[:-1] - starts, lengths)
        return CSR(indptr, self.indices[pos], self.data[pos], (len(rows), self.shape[1]))

    def scale_rows(self, s: np.ndarray) -> CSR:
        s = np.asarray(s, dtype=np.float64)
        return CSR(self.indptr, self.indices, self.data * s[self.row_ids()], self.shape)

    def matvec(self, w: np.ndarray) -> np.ndarray:
        """A w."""
        return np.bincount(self.row_ids(), weights=self.data * w[self.indices], minlength=self.shape[0])

    def rmatvec(self, s: np.ndarray) -> np.ndarray:
        """A^T s."""
        return np.bincount(self.indices, weights=self.data * s[self.row_ids()], minlength=self.shape[1])

    def row_norms_sq(self) -> np.ndarray:
        return np.bincount(self.row_ids(), weights=self.data * self.data, minlength=self.shape[0])

    def toarray(self) -> np.ndarray:
        A = np.zeros(self.shape)
        A[self.row_ids(), self.indices] = self.data
        return A

    def __repr__(self) -> str:
        return f"CSR({self.shape[0]} x {self.shape[1]}, nnz={self.nnz})"


def gram_top_eigenvalue(mats: Sequence[CSR], seed: int = 0, iters: int = 50, tol: float = 1e-5) -> float:
    """The largest eigenvalue of (1/n) sum_i A_i^T A_i / m_i by power iteration: O(nnz + d) a
    step, never a d x d matrix; it stops when the estimate moves by less than ``tol`` (relative)
    or after ``iters`` steps. Power iteration approaches the eigenvalue from below (for a
    spectrum without a gap, slowly: a step size from it is at most a few percent bold); the
    result is capped by the trace bound (the mean squared row norm), which always holds."""
    d = mats[0].shape[1]
    v = np.random.default_rng(streams.derive(seed, streams.DATA, 3)).standard_normal(d)
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iters):
        w = np.zeros(d)
        for A in mats:
            w += A.rmatvec(A.matvec(v)) / len(A)
        w /= len(mats)
        new = float(v @ w)  # the Rayleigh quotient of the unit vector v
        norm = float(np.linalg.norm(w))
        if norm == 0.0:
            return 0.0
        v = w / norm
        if abs(new - lam) <= tol * max(new, 1e-300):
            lam = new
            break
        lam = new
    trace = sum(float(A.row_norms_sq().mean()) for A in mats) / len(mats)
    return min(max(lam, 0.0), trace)
