"""MARINA (Gorbunov, Burlachenko, Li, Richtarik, ICML 2021): compressed gradient differences.

    x_{t+1} = x_t - lr * g_t
    with probability p (one coin for all workers):  g_{t+1} = mean_i grad f_i(x_{t+1})   (d floats each)
    otherwise:  g_{t+1} = g_t + mean_i Q_i(grad f_i(x_{t+1}) - grad f_i(x_t))             (compressed)

Q is unbiased with variance omega; each worker draws its own randomness (independent Q_i). f_i
is the mean loss over shard i (full local gradients: the paper's basic method). g_0 = grad f(x_0).
A natural choice is p = (bits of a compressed message) / (bits of a full one).
"""
from __future__ import annotations

from .estimator import GradientEstimator, _check_compressor, _check_probability, _check_shards, mean_of


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

    def __init__(self, model, shards, lr: float, compressor, p: float | None = None, loss_fn=None,
                 seed: int | None = None):
        super().__init__(model, lr, loss_fn, seed)
        self.shards = _check_shards(shards)
        self.compressor = _check_compressor(compressor, self.d, "unbiased")
        full_bits = self.d * compressor.float_bits
        self.p = _check_probability(min(1.0, compressor.bits / full_bits) if p is None else p)
        self.full_steps = 0

    def _full_round(self):
        grads = self.worker_gradients(self.shards)
        self._send(self.d, self.d * self.compressor.float_bits)
        return mean_of(grads)

    def _initial_estimate(self):
        return self._full_round()

    def _next_estimate(self, x_prev):
        if self.rng.random() < self.p:
            self.full_steps += 1
            return self._full_round()
        new = self.worker_gradients(self.shards)
        loss = self.loss
        # All workers' old gradients in one swap of the parameters, not one swap per worker.
        current = self.params.data
        self.params.set_data(x_prev)
        try:
            old = [self.gradient(shard) for shard in self.shards]
        finally:
            self.params.set_data(current)
        self.loss = loss  # report the loss at the new point
        messages = [self.compressor.compress([a - b for a, b in zip(n, o)]) for n, o in zip(new, old)]
        self._send(self.compressor.floats, self.compressor.bits)
        return [g + m for g, m in zip(self.g, mean_of(messages))]

    def extra_repr(self):
        return f"workers={len(self.shards)}, p={self.p:g}, compressor={self.compressor!r}, "
