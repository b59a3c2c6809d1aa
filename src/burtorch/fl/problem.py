"""What the clients train: per-client data shards, a model factory, and the local loss.

A Problem is sent whole to every process that hosts clients, so it must pickle (module-level
classes and data, no lambdas) for the processes and ray executors; the serial executor takes any.
"""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import _core, seeding
from ..optim.rounds import Smoothness, check_model, check_shards
from ..optim.server import accumulate_samples
from ..oracle import LossFn

__all__ = ["Problem", "SampleProblem", "ModelProblem", "Smoothness", "check_shards", "seeded_defaults"]


@contextlib.contextmanager
def seeded_defaults(seed: int) -> Iterator[None]:
    """Runs a block under bt.manual_seed(seed) and restores the caller's stream of default seeds
    afterwards, so building a model for its initial point leaves the user's stream untouched."""
    saved = seeding._state
    seeding.manual_seed(seed)
    try:
        yield
    finally:
        seeding._state = saved


class Problem:
    """Base class: subclasses set ``dtype`` and implement make_model and accumulate."""

    name = "problem"
    dtype = _core.float64

    def __init__(self, shards: Sequence[Any]) -> None:
        self.shards = check_shards(shards)

    @property
    def n_clients(self) -> int:
        return len(self.shards)

    def shard_sizes(self) -> list[int]:
        return [len(s) for s in self.shards]

    def only(self, ids: Sequence[int]) -> Problem:
        """A shallow copy holding the shards of clients ``ids`` alone (the others None): what a
        worker process or actor is sent, so that it holds its own clients' data only."""
        keep = set(ids)
        part = copy.copy(self)
        part.shards = [s if i in keep else None for i, s in enumerate(self.shards)]
        return part

    def make_model(self) -> Any:
        raise NotImplementedError

    def accumulate(self, model: Any, shard: Any, indices: Sequence[int] | np.ndarray | None = None) -> float:
        """Leaves the gradient of the mean loss over shard[indices] (all of it for None) in the
        model's parameter grads (zeroed first) and returns that mean loss."""
        raise NotImplementedError

    def smoothness(self) -> Smoothness | None:
        return None

    def initial_point(self, seed: int) -> np.ndarray:
        """x_0: the parameters of a model built under the run's seed, as float64."""
        arena = _core.Arena(self.dtype)
        with seeded_defaults(seed), arena:
            model = self.make_model()
        return np.array(model.parameter_vector().numpy(), dtype=np.float64)

    def settings(self) -> dict[str, Any]:
        return {"problem": self.name, "clients": self.n_clients, "samples": sum(self.shard_sizes())}


class SampleProblem(Problem):
    """Shards that are sequences of samples, each fed to ``loss_fn(model, sample)`` (default
    ``model.loss(*sample)``) through the per-sample gradient oracle (``chunk`` samples per graph
    for models with ``loss_batch``)."""

    name = "samples"

    def __init__(self, model_factory: Callable[[], Any], shards: Sequence[Any], loss_fn: LossFn | None = None,
                 chunk: int = 1, dtype: _core.DType | None = None) -> None:
        super().__init__(shards)
        if not callable(model_factory):
            raise TypeError("model_factory must be callable (a Module class or a function returning a Module)")
        self.model_factory = model_factory
        self.loss_fn = loss_fn
        self.chunk = chunk
        if dtype is not None:
            self.dtype = dtype

    def make_model(self) -> Any:
        return self.model_factory()

    def accumulate(self, model: Any, shard: Any, indices: Sequence[int] | np.ndarray | None = None) -> float:
        return accumulate_samples(model, shard, indices, self.loss_fn, self.chunk)


class ModelProblem(SampleProblem):
    """Clients that train an existing model in place: the model is the replica and its current
    parameters are x_0. Serial executor only. (burtorch.optim's GD, PAGE, EF21 and MARINA run the
    same rounds on a model without a federation.)"""

    name = "model"

    def __init__(self, model: Any, shards: Sequence[Any], loss_fn: LossFn | None = None) -> None:
        params = check_model(model)
        super().__init__(lambda: model, shards, loss_fn, dtype=params.dtype)
        self.model = model

    def initial_point(self, seed: int) -> np.ndarray:
        return np.array(self.model.parameter_vector().data, dtype=np.float64)
