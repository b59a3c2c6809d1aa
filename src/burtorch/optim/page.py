"""PAGE: ProbAbilistic Gradient Estimator (Li, Bao, Zhang, Richtarik, ICML 2021).

    x_{t+1} = x_t - lr * g_t
    g_{t+1} = grad_B(x_{t+1})                                  with probability p
              g_t + grad_b(x_{t+1}) - grad_b(x_t)  (same b)    otherwise

grad_B is the gradient over a large minibatch of B samples (the full data set by default) and
grad_b over a fresh minibatch of b samples, evaluated at both points. g_0 = grad_B(x_0). The
paper's choice is p = b / (B + b); then in expectation each step costs O(b) sample gradients.
"""
from __future__ import annotations

from .estimator import GradientEstimator, _check_dataset, _check_probability


class PAGE(GradientEstimator):
    """PAGE on a data set (see the module docstring for the recursion).

    Args:
        model: a :class:`burtorch.nn.Module`.
        data: a sequence of samples.
        lr: the step size.
        batch_size: b, the small minibatch.
        large_batch: B, the large minibatch (default: the whole data set).
        p: the probability of a large-batch step (default b / (B + b)).
        loss_fn: ``loss_fn(model, sample) -> Value``; default ``model.loss(*sample)``.
        seed: the sampler's seed; default :func:`burtorch.seeding.next_seed`.

    Raises:
        ValueError, TypeError: sizes or probabilities out of range, empty data.
    """

    def __init__(self, model, data, lr: float, batch_size: int, large_batch: int | None = None,
                 p: float | None = None, loss_fn=None, seed: int | None = None):
        super().__init__(model, lr, loss_fn, seed)
        self.data = _check_dataset("data", data)
        n = len(self.data)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= n:
            raise ValueError(f"batch_size must be an int in [1, {n}], got {batch_size!r}")
        if large_batch is not None and (isinstance(large_batch, bool) or not isinstance(large_batch, int)
                                        or not 1 <= large_batch <= n):
            raise ValueError(f"large_batch must be None (the full data) or an int in [1, {n}], got {large_batch!r}")
        self.batch_size = batch_size
        self.large_batch = large_batch
        B = n if large_batch is None else large_batch
        self.p = _check_probability(batch_size / (B + batch_size) if p is None else p)
        self.full_steps = 0  # how many times the coin chose the large batch

    def _sample(self, size: int) -> list:
        if size == len(self.data):
            return self.data
        return [self.data[i] for i in self.rng.sample(range(len(self.data)), size)]

    def _large_gradient(self) -> list:
        return self.gradient(self._sample(len(self.data) if self.large_batch is None else self.large_batch))

    def _initial_estimate(self):
        return self._large_gradient()

    def _next_estimate(self, x_prev):
        # The coin is tossed even when p = 1 so that the random stream does not depend on p's value.
        if self.rng.random() < self.p:
            self.full_steps += 1
            return self._large_gradient()
        batch = self._sample(self.batch_size)
        new = self.gradient(batch)
        old = self.gradient_at(x_prev, batch)
        return [g + a - b for g, a, b in zip(self.g, new, old)]

    def extra_repr(self):
        return f"p={self.p:g}, b={self.batch_size}, B={self.large_batch or len(self.data)}, "
