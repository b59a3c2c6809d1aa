"""Distributed gradient descent on a model: n workers each send their full local gradient."""
from __future__ import annotations

from ..fl import methods
from .estimator import GradientEstimator


class GD(GradientEstimator):
    """burtorch.fl's GD over ``shards``; with one shard, plain full-batch gradient descent."""

    def __init__(self, model, shards, lr: float, loss_fn=None, float_bits: int = 32):
        super().__init__(model, shards, methods.GD(lr, float_bits=float_bits), loss_fn)
