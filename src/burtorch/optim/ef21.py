"""EF21: error feedback, fixed (Richtarik, Sokolov, Fatkhullin, NeurIPS 2021).

n workers, worker i holding shard i and its own estimate g_i:

    x_{t+1}     = x_t - lr * g_t
    c_i         = C(grad f_i(x_{t+1}) - g_i^t)          (sent: one compressed message per worker)
    g_i^{t+1}   = g_i^t + c_i
    g_{t+1}     = g_t + mean_i c_i                      (= mean_i g_i^{t+1}, kept by the server)

C is contractive (TopK, Identity, or Scaled(unbiased)). f_i is the mean loss over shard i (full
local gradients, as in the paper's basic method). g_i^0 = grad f_i(x_0), sent uncompressed
(d floats), or C(grad f_i(x_0)) with init="compressed".
"""
from __future__ import annotations

from .estimator import GradientEstimator, _check_compressor, _check_shards, mean_of


class EF21(GradientEstimator):
    """EF21 over per-worker shards (see the module docstring for the recursion).

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

    def __init__(self, model, shards, lr: float, compressor, loss_fn=None, init: str = "full"):
        super().__init__(model, lr, loss_fn)
        self.shards = _check_shards(shards)
        self.compressor = _check_compressor(compressor, self.d, "contractive")
        if init not in ("full", "compressed"):
            raise ValueError(f"init must be 'full' or 'compressed', got {init!r}")
        self.init = init
        self.worker_g: list | None = None

    def _local_gradients(self) -> list:
        return self.worker_gradients(self.shards)

    def _initial_estimate(self):
        grads = self._local_gradients()
        if self.init == "full":
            self.worker_g = grads
            self._send(self.d, self.d * self.compressor.float_bits)
        else:
            self.worker_g = [self.compressor.compress(g) for g in grads]
            self._send(self.compressor.floats, self.compressor.bits)
        return mean_of(self.worker_g)

    def _next_estimate(self, x_prev):
        messages = []
        for i, grad in enumerate(self._local_gradients()):
            gi = self.worker_g[i]
            c = self.compressor.compress([a - b for a, b in zip(grad, gi)])
            self.worker_g[i] = [a + b for a, b in zip(gi, c)]
            messages.append(c)
        self._send(self.compressor.floats, self.compressor.bits)
        return [g + c for g, c in zip(self.g, mean_of(messages))]

    def extra_repr(self):
        return f"workers={len(self.shards)}, compressor={self.compressor!r}, "
