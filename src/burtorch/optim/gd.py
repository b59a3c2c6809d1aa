"""Distributed gradient descent on a model: n workers each send their full local gradient."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fl import methods
from ..oracle import LossFn
from .estimator import GradientEstimator


class GD(GradientEstimator):
    """burtorch.fl's GD over ``shards``; with one shard, plain full-batch gradient descent."""

    def __init__(self, model: Any, shards: Sequence[Sequence[Any]], lr: float, loss_fn: LossFn | None = None,
                 float_bits: int = 32) -> None:
        super().__init__(model, shards, methods.GD(lr, float_bits=float_bits), loss_fn)
