"""Distributed gradient descent: the baseline the compressed methods are measured against."""
from __future__ import annotations

from .compressors import _check_int
from .estimator import GradientEstimator, _check_shards, mean_of


class GD(GradientEstimator):
    """n workers each send their full local gradient (d floats) every step; g = their mean.

    With one shard this is plain full-batch gradient descent.

    Args:
        model: a :class:`burtorch.nn.Module`.
        shards: one dataset (a sequence of samples) per worker.
        lr: the step size.
        loss_fn: ``loss_fn(model, sample) -> Value``; default ``model.loss(*sample)``.
        float_bits: bits counted per float sent.

    Raises:
        ValueError, TypeError: an empty shard, a bad step size or bit count.
    """

    def __init__(self, model, shards, lr: float, loss_fn=None, float_bits: int = 32):
        super().__init__(model, lr, loss_fn)
        self.shards = _check_shards(shards)
        self.float_bits = _check_int("float_bits", float_bits, 1)

    def _local_gradients(self) -> list:
        grads = self.worker_gradients(self.shards)
        self._send(self.d, self.d * self.float_bits)
        return grads

    def _initial_estimate(self):
        return mean_of(self._local_gradients())

    def _next_estimate(self, x_prev):
        return mean_of(self._local_gradients())

    def extra_repr(self):
        return f"workers={len(self.shards)}, "
