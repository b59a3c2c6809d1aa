"""MARINA on a model (Gorbunov, Burlachenko, Li, Richtarik 2021; the rule is burtorch.fl.methods.marina)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fl import methods
from ..fl.compressors import Compressor
from ..oracle import LossFn
from .estimator import GradientEstimator


class MARINA(GradientEstimator):
    """MARINA over per-worker shards (see the module docstring for the recursion).

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
