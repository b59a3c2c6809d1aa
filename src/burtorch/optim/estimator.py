"""The protocol of gradient-estimator methods (GD, PAGE, EF21, MARINA).

Unlike SGD/Adam, which consume whatever grads the caller left in the parameters, these methods
decide themselves WHERE and ON WHICH DATA gradients are taken (at the previous point too, on the
same minibatch, per worker), so they drive the oracle themselves. Each is built on a model and
its data, and ``step()`` does one iteration

    x_{t+1} = x_t - lr * g_t,   then   g_{t+1} = estimate(...)     (g_0 on the first call)

Data and model are bound at construction (not passed to step) because the state g_t (and, per
worker, g_i^t) is only meaningful for the data it was built from, as torch.optim binds params.

Every gradient goes through ``bt.grad_oracle`` (per-sample graphs, seed 1/b, rewind). Parameter
values move between the arena and Python lists with ``Vector.data`` / ``Vector.set_data``.

Counters: ``steps``; ``sample_grads`` (per-sample gradients evaluated, the oracle complexity of
the variance-reduction literature); ``floats_sent`` / ``bits_sent`` (per worker, cumulative,
the initial message included) for distributed methods.
"""
from __future__ import annotations

import random

from .. import _core
from ..oracle import grad_oracle, mean_loss  # noqa: F401  (mean_loss: part of burtorch.optim)
from ..seeding import next_seed
from .optimizer import _check_hyper


def _check_dataset(name, data):
    try:
        n = len(data)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of samples, got {type(data).__name__}") from None
    if n == 0:
        raise ValueError(f"{name} is empty")
    return data


def _check_shards(shards):
    if not isinstance(shards, (list, tuple)) or not shards:
        raise ValueError("shards must be a non-empty list of per-worker datasets")
    for i, shard in enumerate(shards):
        _check_dataset(f"shard {i}", shard)
    return list(shards)


def _check_probability(p):
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 < p <= 1.0:
        raise ValueError(f"p must be a probability in (0, 1], got {p!r}")
    return float(p)


def _check_compressor(compressor, d, need):
    from .compressors import Compressor

    if not isinstance(compressor, Compressor):
        raise TypeError(f"expected a Compressor, got {type(compressor).__name__}")
    if compressor.d != d:
        raise ValueError(f"the compressor was built for d={compressor.d}, the model has {d} parameters")
    if need == "unbiased" and not compressor.unbiased:
        raise ValueError(f"this method needs an unbiased compressor (RandK, RandomDithering, Identity), "
                         f"got {type(compressor).__name__}")
    if need == "contractive" and compressor.alpha is None:
        raise ValueError(f"this method needs a contractive compressor (TopK, Identity, Scaled(...)), "
                         f"got {type(compressor).__name__}")
    return compressor


class GradientEstimator:
    """Base class; subclasses implement ``_initial_estimate()`` and ``_next_estimate(x_prev)``."""

    def __init__(self, model, lr: float, loss_fn=None, seed: int | None = None):
        if not hasattr(model, "parameter_vector"):
            raise TypeError(f"expected a burtorch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.params = model.parameter_vector()
        if not isinstance(self.params, _core.Vector) or len(self.params) == 0:
            raise ValueError("the model has no parameters")
        self.d = len(self.params)
        self.lr = _check_hyper("lr", lr, lo_open=True)
        self.loss_fn = loss_fn
        self.rng = random.Random(next_seed() if seed is None else seed)
        self.g: list | None = None
        self.loss: float | None = None   # the mean loss seen by the last estimate's oracle calls
        self.steps = 0
        self.sample_grads = 0
        self.floats_sent = 0
        self.bits_sent = 0

    # ---- the oracle ----
    def gradient(self, batch) -> list:
        """The gradient of the mean loss over ``batch`` at the current parameters, as a list."""
        self.loss = grad_oracle(self.model, batch, self.loss_fn)
        self.sample_grads += len(batch)
        return self.params.grad

    def worker_gradients(self, shards) -> list:
        """Each worker's gradient on its shard at the current parameters; self.loss becomes the mean
        of the workers' losses."""
        grads, losses = [], []
        for shard in shards:
            grads.append(self.gradient(shard))
            losses.append(self.loss)
        self.loss = sum(losses) / len(losses)
        return grads

    def gradient_at(self, x: list, batch) -> list:
        """The same at parameters ``x``: swapped in for the evaluation, then restored."""
        current = self.params.data
        self.params.set_data(x)
        try:
            loss = self.loss
            g = self.gradient(batch)
            self.loss = loss  # report losses at the current point only
        finally:
            self.params.set_data(current)
        return g

    # ---- one iteration ----
    def step(self) -> float | None:
        """x <- x - lr * g, then refreshes g. Returns the latest oracle loss (at the new point)."""
        if self.g is None:
            self.g = self._initial_estimate()
        x_prev = self.params.data
        lr = self.lr
        self.params.set_data([x - lr * g for x, g in zip(x_prev, self.g)])
        self.g = self._next_estimate(x_prev)
        self.steps += 1
        return self.loss

    def _initial_estimate(self) -> list:
        raise NotImplementedError

    def _next_estimate(self, x_prev: list) -> list:
        raise NotImplementedError

    def _send(self, floats: int, bits: int) -> None:
        self.floats_sent += floats
        self.bits_sent += bits

    def __repr__(self):
        return f"{type(self).__name__}(d={self.d}, lr={self.lr:g}, {self.extra_repr()}steps={self.steps})"

    def extra_repr(self) -> str:
        return ""


def mean_of(vectors: list) -> list:
    """The coordinate-wise mean of equally long lists."""
    n = len(vectors)
    return [sum(column) / n for column in zip(*vectors)]
