from __future__ import annotations

from .. import _core
from .optimizer import Optimizer, Params, _check_hyper


class SGD(Optimizer):
    """SGD with momentum, dampening, Nesterov and (L2) weight decay, as ``torch.optim.SGD``.

    Args:
        params: a module, a list of parameter Vectors, or one Vector.
        lr: the learning rate.
        momentum: the momentum factor (0: none).
        weight_decay: L2 penalty added to the gradient.
        dampening: dampening of the momentum.
        nesterov: Nesterov momentum (needs momentum > 0 and dampening 0).

    Raises:
        ValueError: a negative or non-numeric hyperparameter, or Nesterov without momentum.
        TypeError: parameters that are not Vectors.
    """

    def __init__(self, params: Params, lr: float = 0.1, momentum: float = 0.0, weight_decay: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False) -> None:
        self.lr = _check_hyper("lr", lr)
        self.momentum = _check_hyper("momentum", momentum)
        self.weight_decay = _check_hyper("weight_decay", weight_decay)
        self.dampening = _check_hyper("dampening", dampening)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening = 0")
        self.nesterov = bool(nesterov)
        self.buffers = 1 if self.momentum else 0
        super().__init__(params)

    def step(self) -> None:
        _core.sgd_step(self.params, self.state, self.lr, self.momentum, self.weight_decay, self.dampening,
                       self.nesterov)
