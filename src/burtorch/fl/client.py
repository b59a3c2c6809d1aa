"""The client side: a group of clients hosted by one process, and the oracle a method's client
code calls.

A group holds its clients' shards and method states and ONE model replica in an arena of its
own. The server broadcasts x at every round's start, so a replica per client would hold nothing
a client needs between rounds; sharing it keeps a client's resident state to its data and its
method vectors (1,000 clients of the default problem in a few MB).
"""
from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _core
from . import streams

if TYPE_CHECKING:
    from .compressors import Message
    from .methods import Method
    from .problem import Problem


@dataclass
class Round:
    """What the server broadcasts: the round index, the point, the previous point (for methods
    that evaluate there), the shared coin, the run seed and the number of clients."""

    t: int
    x: np.ndarray
    x_prev: np.ndarray | None
    coin: bool | None
    seed: int
    n_clients: int


@dataclass
class Reply:
    """What a client returns: its message (None when it only reports metrics), the per-sample
    gradients it evaluated, the loss its oracle saw at x, and, on evaluation rounds, its full
    local loss and gradient at x (for the run's metrics, not counted as communication)."""

    client: int
    message: Message | None
    samples: int
    loss: float | None
    metric: tuple[float, np.ndarray] | None = None


class Oracle:
    """One client's gradients in one round; full local gradients at x are computed once."""

    def __init__(self, group: ClientGroup, client: int, ctx: Round) -> None:
        self.group, self.client, self.ctx = group, client, ctx
        self.seed, self.round = ctx.seed, ctx.t
        self.samples = 0
        self.loss_at_x: float | None = None
        self._full: tuple[float, np.ndarray] | None = None

    def gradient(self, x: np.ndarray, indices: Sequence[int] | np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """(loss, gradient as a new float64 array) of the mean loss over the client's shard (or
        the samples at ``indices``) at point x."""
        loss, grad = self.group.evaluate(self.client, x, indices)
        self.samples += self.group.shard_size(self.client) if indices is None else len(indices)
        if x is self.ctx.x and self.loss_at_x is None:
            self.loss_at_x = loss
        return loss, grad

    def full(self) -> tuple[float, np.ndarray]:
        if self._full is None:
            self._full = self.gradient(self.ctx.x)
        return self._full

    def minibatch_indices(self, b: int, key: int = 0) -> np.ndarray:
        """b distinct sample indices, drawn from (seed, client, round, key) alone."""
        r = streams.rng(self.seed, streams.MINIBATCH, self.client, self.round, key)
        return np.array(sorted(r.sample(range(self.group.shard_size(self.client)), b)), dtype=np.int64)

    def minibatch(self, b: int, key: int = 0) -> tuple[float, np.ndarray]:
        return self.gradient(self.ctx.x, self.minibatch_indices(b, key))


class ClientGroup:
    """Clients ``ids`` of ``problem`` running ``method``; lives in whichever process hosts them."""

    def __init__(self, problem: Problem, method: Method, ids: Iterable[int], threads: int | None = None) -> None:
        # A worker process or actor is given one core: its native records must not split across
        # threads that would compete with the other workers for the same cores.
        if threads is not None:
            _core.set_num_threads(threads)
        self.problem, self.method = problem, method
        self.ids = list(ids)
        self.states: dict[int, dict[str, Any]] = {i: {} for i in self.ids}
        self.arena = _core.Arena(problem.dtype)
        with self.arena:
            self.model = problem.make_model()
        self.params = self.model.parameter_vector()
        self._values = self.params.numpy("values", writable=True) if self.params.contiguous else None

    def shard_size(self, i: int) -> int:
        return len(self.problem.shards[i])

    def _load(self, x: np.ndarray) -> None:
        # copied on every evaluation: O(d), and a method may update its point in place
        if self._values is not None:
            self._values[:] = x
        else:
            self.params.set_data(x.tolist())

    def evaluate(self, i: int, x: np.ndarray,
                 indices: Sequence[int] | np.ndarray | None = None) -> tuple[float, np.ndarray]:
        self._load(x)
        with self.params.arena:  # the sample's nodes go where the replica's parameters are
            loss = self.problem.accumulate(self.model, self.problem.shards[i], indices)
        return loss, np.array(self.params.numpy("grads"), dtype=np.float64)

    def run(self, ctx: Round, participants: Iterable[int], evaluate: bool) -> list[Reply]:
        """The round for this group's clients: participants compute their messages; with
        ``evaluate`` every client also reports its full local loss and gradient at x."""
        taking_part = set(participants)
        replies = []
        for i in self.ids:
            if i not in taking_part and not evaluate:
                continue
            oracle = Oracle(self, i, ctx)
            message = self.method.client(self.states[i], oracle, ctx) if i in taking_part else None
            metric = None
            if evaluate:  # reuses the client's own full gradient at x; not counted as its work
                metric = oracle._full if oracle._full is not None else self.evaluate(i, ctx.x)
            replies.append(Reply(i, message, oracle.samples, oracle.loss_at_x, metric))
        return replies

    def run_packed(self, ctx: bytes, participants: list[int], evaluate: bool) -> bytes:
        """:meth:`run` with the round and the replies as pickles: how a Ray actor is called. Ray's
        own serialization of 32 small replies (dataclasses holding numpy arrays) took about twice
        the clients' compute of a small model's round; one pickle each way does not."""
        return pickle.dumps(self.run(pickle.loads(ctx), participants, evaluate), protocol=pickle.HIGHEST_PROTOCOL)

    def state_of(self, i: int) -> dict[str, Any]:
        return self.states[i]

    def where(self) -> tuple[int, str | None]:
        """(process id, Ray node id or None): where this group lives."""
        ray = sys.modules.get("ray")
        node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None
        return os.getpid(), node

    def resident_bytes(self) -> int:
        """Bytes of the clients' method vectors (numpy arrays in their states)."""
        return sum(v.nbytes for s in self.states.values() for v in s.values() if isinstance(v, np.ndarray))
