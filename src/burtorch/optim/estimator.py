"""Gradient-estimator methods on one model in this process: GD, PAGE, EF21 and MARINA, one client
per data shard, the model itself as every client's replica.

Unlike SGD/Adam, which consume whatever grads the caller left in the parameters, these methods
decide themselves where and on which data gradients are taken, so they drive the oracle. Each
``step()`` does one iteration

    x_{t+1} = x_t - lr * g_t,   then   g_{t+1} = estimate(...)     (g_0 on the first call)

with the update rules of burtorch.optim.methods and the rounds of burtorch.optim.server (the
same code burtorch.fl runs on many clients), and leaves x_{t+1} in the model's parameters.
Counters: ``steps``; ``sample_grads`` (per-sample gradients evaluated, the oracle complexity of
variance reduction); ``floats_sent`` / ``bits_sent`` (per worker, cumulative, the initial
message included).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..oracle import (
    LossFn,
    mean_loss,  # noqa: F401  (part of burtorch.optim's API)
)
from . import methods
from .compressors import Compressor
from .rounds import check_model, check_shards
from .server import LocalClients, Server, accumulate_samples


class GradientEstimator:
    """Base of GD, PAGE, EF21 and MARINA: ``method`` (a burtorch.optim.methods Method) over ``shards``."""

    def __init__(self, model: Any, shards: Sequence[Sequence[Any]], method: methods.Method,
                 loss_fn: LossFn | None = None, seed: int | None = None) -> None:
        self.model = model
        self.params = check_model(model)
        shards = check_shards(shards)
        x0 = np.array(self.params.data, dtype=np.float64)
        # one process, nothing sent: the update rule in float64, its bits counted at float_bits
        method.exact = True
        self.rounds = Server(method, x0, [len(s) for s in shards], seed=seed)
        self.clients = LocalClients(method, model, shards, functools.partial(accumulate_samples, loss_fn=loss_fn),
                                    range(len(shards)))
        self.method = method
        self.d = self.rounds.d
        self.n_workers = self.rounds.n
        self._last: dict[str, Any] | None = None

    def _round(self) -> None:
        ctx = self.rounds.open_round()
        self._last = self.rounds.close_round(ctx, self.clients.run(ctx, self.clients.ids, False))

    def step(self) -> float | None:
        """x <- x - lr * g, then refreshes g. Returns the mean loss the oracle saw at the new point."""
        if self.rounds.t == 0:
            self._round()
        self._round()
        self.params.set_data(self.rounds.x.tolist())
        return self.loss

    @property
    def lr(self) -> float | None:
        return self.method.lr

    @property
    def g(self) -> list[float] | None:
        g = self.rounds.server.get("g")
        return None if g is None else g.tolist()

    @property
    def loss(self) -> float | None:
        return None if self._last is None else self._last["oracle_loss"]

    @property
    def steps(self) -> int:
        return max(0, self.rounds.t - 1)

    @property
    def sample_grads(self) -> int:
        return self.rounds.total_samples

    @property
    def bits_sent(self) -> int:
        return self.rounds.total_bits // self.n_workers

    @property
    def floats_sent(self) -> int:
        return self.rounds.total_floats // self.n_workers

    @property
    def full_steps(self) -> int:
        """Rounds after the first in which the coin chose full gradients (PAGE, MARINA)."""
        return self.rounds.server.get("full_rounds", 0)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d={self.d}, workers={self.n_workers}, {self.method!r}, steps={self.steps})"


class GD(GradientEstimator):
    """Distributed gradient descent over ``shards``: each worker sends its full local gradient;
    with one shard, plain full-batch gradient descent."""

    def __init__(self, model: Any, shards: Sequence[Sequence[Any]], lr: float, loss_fn: LossFn | None = None,
                 float_bits: int = 32) -> None:
        super().__init__(model, shards, methods.GD(lr, float_bits=float_bits), loss_fn)


class PAGE(GradientEstimator):
    """PAGE on one data set (Li, Bao, Zhang, Richtarik 2021): the rule of
    burtorch.optim.methods.marina with one client, i.e. VR-MARINA without compression. The coin's
    full rounds use the whole data set.

    Args:
        model: a :class:`burtorch.nn.Module`.
        data: the data set (a sequence of samples).
        lr: the step size.
        batch_size: the minibatch of the rounds that add a gradient difference to the estimate.
        p: the probability of a full-gradient round (default: b / (m + b), m the data size).
        loss_fn: ``loss_fn(model, sample) -> Value``; default ``model.loss(*sample)``.
        seed: the coin's seed; default :func:`burtorch.seeding.next_seed`.

    Raises:
        ValueError, TypeError: empty data, a batch larger than the data, a bad p.
    """

    method: methods.PAGE

    def __init__(self, model: Any, data: Sequence[Any], lr: float, batch_size: int, p: float | None = None,
                 loss_fn: LossFn | None = None, seed: int | None = None) -> None:
        super().__init__(model, [data], methods.PAGE(lr, batch=batch_size, p=p), loss_fn, seed)

    @property
    def p(self) -> float:
        return self.method.p

    @property
    def batch_size(self) -> int:
        return self.method.batch


class EF21(GradientEstimator):
    """EF21 over per-worker shards (Richtarik, Sokolov, Fatkhullin 2021; the recursion is in
    burtorch.optim.methods.ef21).

    Args:
        model: a :class:`burtorch.nn.Module`.
        shards: one dataset (a sequence of samples) per worker.
        lr: the step size.
        compressor: a contractive compressor (TopK, Identity, Scaled(...)) built for the model's d.
        loss_fn: ``loss_fn(model, sample) -> Value``; default ``model.loss(*sample)``.
        init: ``"full"`` (g_i^0 sent uncompressed) or ``"compressed"``.

    Raises:
        ValueError, TypeError: an empty shard, a compressor of another kind or size, a bad init.
    """

    def __init__(self, model: Any, shards: Sequence[Sequence[Any]], lr: float, compressor: Compressor,
                 loss_fn: LossFn | None = None, init: str = "full") -> None:
        super().__init__(model, shards, methods.EF21(lr, compressor, init=init), loss_fn)

    @property
    def worker_g(self) -> list[list[float]]:
        """Each worker's g_i."""
        return [self.clients.state_of(i)["g"].tolist() for i in range(self.n_workers)]


class MARINA(GradientEstimator):
    """MARINA over per-worker shards (Gorbunov, Burlachenko, Li, Richtarik 2021; the recursion is
    in burtorch.optim.methods.marina).

    Args:
        model: a :class:`burtorch.nn.Module`.
        shards: one dataset (a sequence of samples) per worker.
        lr: the step size.
        compressor: an unbiased compressor (RandK, RandomDithering, Identity) built for the model's d.
        p: the probability of a full-gradient round (default: the bits of a compressed message
            over the bits of a full one).
        loss_fn: ``loss_fn(model, sample) -> Value``; default ``model.loss(*sample)``.
        seed: the coin's seed; default :func:`burtorch.seeding.next_seed`.

    Raises:
        ValueError, TypeError: an empty shard, a compressor of another kind or size, a bad p.
    """

    method: methods.MARINA

    def __init__(self, model: Any, shards: Sequence[Sequence[Any]], lr: float, compressor: Compressor,
                 p: float | None = None, loss_fn: LossFn | None = None, seed: int | None = None) -> None:
        super().__init__(model, shards, methods.MARINA(lr, compressor, p=p), loss_fn, seed)

    @property
    def p(self) -> float:
        return self.method.p
