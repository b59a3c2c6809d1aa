from __future__ import annotations

from .. import _core
from .optimizer import Optimizer, Params, _check_hyper


class Adam(Optimizer):
    """Adam with L2 weight decay added to the gradient, as ``torch.optim.Adam``.

    Args:
        params: a module, a list of parameter Vectors, or one Vector.
        lr: the learning rate.
        betas: the decay rates of the first and second moment estimates, each in [0, 1).
        eps: added to the denominator.
        weight_decay: L2 penalty added to the gradient.

    Raises:
        ValueError: a hyperparameter out of range.
        TypeError: parameters that are not Vectors.
    """

    buffers = 2
    decoupled = False

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        self.lr = _check_hyper("lr", lr)
        self.beta1 = _check_hyper("beta1", betas[0], hi=1.0)
        self.beta2 = _check_hyper("beta2", betas[1], hi=1.0)
        self.eps = _check_hyper("eps", eps)
        self.weight_decay = _check_hyper("weight_decay", weight_decay)
        super().__init__(params)

    def step(self) -> None:
        _core.adam_step(self.params, self.state, self.lr, self.beta1, self.beta2, self.eps, self.weight_decay,
                        self.decoupled)


class AdamW(Adam):
    """Adam with decoupled weight decay, as ``torch.optim.AdamW``.

    Args: as :class:`Adam`, with ``weight_decay`` (default 0.01) applied to the parameters
    directly instead of the gradient.
    """

    decoupled = True

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)
