"""EF21 on a model (Richtarik, Sokolov, Fatkhullin 2021; the rule is burtorch.fl.methods.ef21)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fl import methods
from ..fl.compressors import Compressor
from ..oracle import LossFn
from .estimator import GradientEstimator


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

    def __init__(self, model: Any, shards: Sequence[Sequence[Any]], lr: float, compressor: Compressor,
                 loss_fn: LossFn | None = None, init: str = "full") -> None:
        super().__init__(model, shards, methods.EF21(lr, compressor, init=init), loss_fn)

    @property
    def worker_g(self) -> list[list[float]]:
        """Each worker's g_i."""
        return [self.fed.executor.state_of(i)["g"].tolist() for i in range(self.n_workers)]
