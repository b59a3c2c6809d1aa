"""PAGE on a model and one data set (Li, Bao, Zhang, Richtarik 2021): burtorch.fl's PAGE with one
client, i.e. VR-MARINA without compression. The coin's full rounds use the whole data set."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fl import methods
from ..oracle import LossFn
from .estimator import GradientEstimator


class PAGE(GradientEstimator):
    """PAGE over one data set (see the module docstring).

    Args:
        model: a :class:`burtorch.nn.Module`.
        data: the data set (a sequence of samples).
        lr: the step size.
        batch_size: the minibatch of the rounds that add a gradient difference to the estimate.
        p: the probability of a full-gradient round (default: b / (m + b), m the data size).
        loss_fn: ``loss_fn(model, sample) -> Value``; default ``model.loss(*sample)``.
        seed: the coin's seed; default :func:`burtorch.seeding.next_seed`.

    Raises:
        ValueError, TypeError: empty data, a batch larger than the data, a bad p.
    """

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
