"""EF21 on a model (Richtarik, Sokolov, Fatkhullin 2021; the rule is burtorch.fl.methods.ef21)."""
from __future__ import annotations

from ..fl import methods
from .estimator import GradientEstimator


class EF21(GradientEstimator):
    def __init__(self, model, shards, lr: float, compressor, loss_fn=None, init: str = "full"):
        super().__init__(model, shards, methods.EF21(lr, compressor, init=init), loss_fn)

    @property
    def worker_g(self) -> list:
        """Each worker's g_i."""
        return [self.fed.executor.state_of(i)["g"].tolist() for i in range(self.n_workers)]
