"""Gradient-estimator methods on one model in this process: a federated run of burtorch.fl with
the serial executor, one client per data shard, the model itself as the replica.

Unlike SGD/Adam, which consume whatever grads the caller left in the parameters, these methods
decide themselves where and on which data gradients are taken, so they drive the oracle. Each
``step()`` does one iteration

    x_{t+1} = x_t - lr * g_t,   then   g_{t+1} = estimate(...)     (g_0 on the first call)

with the update rules of burtorch.fl.methods (one implementation for both uses), and leaves
x_{t+1} in the model's parameters. Counters: ``steps``; ``sample_grads`` (per-sample gradients
evaluated, the oracle complexity of variance reduction); ``floats_sent`` / ``bits_sent`` (per
worker, cumulative, the initial message included).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fl.federation import Federation
from ..fl.methods import Method
from ..fl.problem import ModelProblem
from ..oracle import (
    LossFn,
    mean_loss,  # noqa: F401  (part of burtorch.optim's API)
)


class GradientEstimator:
    """Base of GD, PAGE, EF21 and MARINA: ``method`` (a burtorch.fl Method) over ``shards``."""

    def __init__(self, model: Any, shards: Sequence[Sequence[Any]], method: Method, loss_fn: LossFn | None = None,
                 seed: int | None = None) -> None:
        self.model = model
        self.fed = Federation(ModelProblem(model, shards, loss_fn), method, seed=seed, eval_every=0)
        self.method = method
        self.params = model.parameter_vector()
        self.d = self.fed.d
        self.n_workers = self.fed.n

    def step(self) -> float | None:
        """x <- x - lr * g, then refreshes g. Returns the mean loss the oracle saw at the new point."""
        if self.fed.t == 0:
            self.fed.round()
        self.fed.round()
        self.params.set_data(self.fed.x.tolist())
        return self.loss

    @property
    def lr(self) -> float | None:
        return self.method.lr

    @property
    def g(self) -> list[float] | None:
        g = self.fed.server.get("g")
        return None if g is None else g.tolist()

    @property
    def loss(self) -> float | None:
        return self.fed.records[-1]["oracle_loss"] if self.fed.records else None

    @property
    def steps(self) -> int:
        return max(0, self.fed.t - 1)

    @property
    def sample_grads(self) -> int:
        return self.fed.total_samples

    @property
    def bits_sent(self) -> int:
        return self.fed.total_bits // self.n_workers

    @property
    def floats_sent(self) -> int:
        return self.fed.total_floats // self.n_workers

    @property
    def full_steps(self) -> int:
        """Rounds after the first in which the coin chose full gradients (PAGE, MARINA)."""
        return self.fed.server.get("full_rounds", 0)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d={self.d}, workers={self.n_workers}, {self.method!r}, steps={self.steps})"
