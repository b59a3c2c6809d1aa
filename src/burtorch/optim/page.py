"""PAGE on a model and one data set (Li, Bao, Zhang, Richtarik 2021): burtorch.fl's PAGE with one
client, i.e. VR-MARINA without compression. The coin's full rounds use the whole data set."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fl import methods
from ..oracle import LossFn
from .estimator import GradientEstimator


class PAGE(GradientEstimator):
    method: methods.PAGE

    def __init__(self, model: Any, data: Sequence[Any], lr: float, batch_size: int, p: float | None = None,
                 loss_fn: LossFn | None = None, seed: int | None = None) -> None:
        super().__init__(model, [data], methods.PAGE(lr, batch=batch_size, p=p), loss_fn, seed)

    @property
    def p(self) -> float:
        return self.method.p

    @property
    def batch_size(self) -> int:
        return self.method.batch
