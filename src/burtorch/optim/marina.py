"""MARINA on a model (Gorbunov, Burlachenko, Li, Richtarik 2021; the rule is burtorch.fl.methods.marina)."""
from __future__ import annotations

from ..fl import methods
from .estimator import GradientEstimator


class MARINA(GradientEstimator):
    def __init__(self, model, shards, lr: float, compressor, p: float | None = None, loss_fn=None,
                 seed: int | None = None):
        super().__init__(model, shards, methods.MARINA(lr, compressor, p=p), loss_fn, seed)

    @property
    def p(self) -> float:
        return self.method.p
