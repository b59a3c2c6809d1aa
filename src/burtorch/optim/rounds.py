"""What a gradient-estimator method sees of a round: the server's broadcast, a client's reply, the
oracle a client's code calls for its local gradients, and the smoothness constants of the theory.

These are plain data and one small class, shared by the methods (burtorch.optim.methods), the
single-process research optimizers (burtorch.optim.estimator) and the federated runs (burtorch.fl),
which host clients in this process, in worker processes or on Ray.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import streams

if TYPE_CHECKING:
    from .compressors import Message


@dataclass(frozen=True)
class Smoothness:
    """Lipschitz constants of the gradients, as the theorems of the compressed methods use them.

    L: of f = (1/n) sum_i f_i;  L_tilde: sqrt((1/n) sum_i L_i^2) over the clients' f_i;
    L_max: the largest over single samples (minibatch methods); L_local: each client's L_i, where
    the problem knows them (client sampling by importance draws client i with probability ∝ L_i)."""

    L: float
    L_tilde: float
    L_max: float
    L_local: tuple[float, ...] | None = None


@dataclass
class Round:
    """What the server broadcasts: the round index, the point, the previous point (for methods
    that evaluate there), the shared coin, the run seed and the number of clients; with client
    sampling by importance, each client's probability of taking part (the methods that average
    reweight by them, so that their estimates stay unbiased)."""

    t: int
    x: np.ndarray
    x_prev: np.ndarray | None
    coin: bool | None
    seed: int
    n_clients: int
    probabilities: tuple[float, ...] | None = None


@dataclass
class Reply:
    """What a client returns: its message (None when it only reports metrics), the per-sample
    gradients it evaluated, the loss its oracle saw at x, and, on evaluation rounds, its full
    local loss and gradient at x (for the run's metrics, not counted as communication)."""

    client: int
    message: Message | None
    samples: int
    loss: float | None
    metric: tuple[float, np.ndarray] | None = None


class Host(Protocol):
    """Where clients' data lives: whatever evaluates a client's mean loss and its gradient."""

    def evaluate(self, i: int, x: np.ndarray,
                 indices: Sequence[int] | np.ndarray | None = None) -> tuple[float, np.ndarray]: ...

    def shard_size(self, i: int) -> int: ...


class Oracle:
    """One client's gradients in one round; full local gradients at x are computed once."""

    def __init__(self, group: Host, client: int, ctx: Round) -> None:
        self.group, self.client, self.ctx = group, client, ctx
        self.seed, self.round = ctx.seed, ctx.t
        self.samples = 0
        self.loss_at_x: float | None = None
        self._full: tuple[float, np.ndarray] | None = None

    def gradient(self, x: np.ndarray, indices: Sequence[int] | np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """(loss, gradient as a new float64 array) of the mean loss over the client's shard (or
        the samples at ``indices``) at point x."""
        loss, grad = self.group.evaluate(self.client, x, indices)
        self.samples += self.group.shard_size(self.client) if indices is None else len(indices)
        if x is self.ctx.x and self.loss_at_x is None:
            self.loss_at_x = loss
        return loss, grad

    def full(self) -> tuple[float, np.ndarray]:
        if self._full is None:
            self._full = self.gradient(self.ctx.x)
        return self._full

    def minibatch_indices(self, b: int, key: int = 0) -> np.ndarray:
        """b distinct sample indices, drawn from (seed, client, round, key) alone."""
        r = streams.rng(self.seed, streams.MINIBATCH, self.client, self.round, key)
        return np.array(sorted(r.sample(range(self.group.shard_size(self.client)), b)), dtype=np.int64)

    def minibatch(self, b: int, key: int = 0) -> tuple[float, np.ndarray]:
        return self.gradient(self.ctx.x, self.minibatch_indices(b, key))


def check_model(model: Any) -> Any:
    """The parameter Vector of ``model``, a burtorch.nn.Module with at least one parameter."""
    if not hasattr(model, "parameter_vector"):
        raise TypeError(f"expected a burtorch.nn.Module, got {type(model).__name__}")
    params = model.parameter_vector()
    if len(params) == 0:
        raise ValueError("the model has no parameters")
    return params


def check_shards(shards: Sequence[Any]) -> list[Any]:
    """``shards`` as a list of non-empty sequences of samples, one per client."""
    if not isinstance(shards, (list, tuple)) or not shards:
        raise ValueError("shards must be a non-empty list with one data set per client")
    for i, shard in enumerate(shards):
        try:
            n = len(shard)
        except TypeError:
            raise TypeError(f"shard {i} must be a sequence of samples, got {type(shard).__name__}") from None
        if n == 0:
            raise ValueError(f"client {i} has no data")
    return list(shards)
