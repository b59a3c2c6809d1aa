"""The two sides of a round of a gradient-estimator method, written once for every place that
runs one: the single-process research optimizers (burtorch.optim.estimator) and the federated
runs of burtorch.fl, whose executors only decide where the clients (:class:`LocalClients`) live.

Round t (t = 0, 1, ...):

1. for t > 0 the method moves the point (x <- x - lr g for gradient-estimator methods);
2. the server draws the round's coin (MARINA/PAGE) and broadcasts (t, x, previous x, coin, seed);
3. each participating client returns one message (:meth:`LocalClients.run`);
4. the method absorbs the messages in client order and may move x (FedAvg).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import numpy as np

from ..oracle import LossFn, grad_oracle
from ..seeding import next_seed
from .methods import Method
from .rounds import Oracle, Reply, Round, Smoothness

# How a client's gradients are taken: (model, shard, indices or None) -> the mean loss, its
# gradient left in the model's parameters.
Accumulate: TypeAlias = Callable[[Any, Any, "Sequence[int] | np.ndarray | None"], float]


def accumulate_samples(model: Any, shard: Any, indices: Sequence[int] | np.ndarray | None = None,
                       loss_fn: LossFn | None = None, chunk: int = 1) -> float:
    """The per-sample gradient oracle over ``shard[indices]`` (all of it for None): the mean loss,
    its gradient left in the model's parameters (``loss_fn(model, sample)``, default
    ``model.loss(*sample)``; ``chunk`` samples per graph for models with ``loss_batch``)."""
    batch = shard if indices is None else [shard[i] for i in indices]
    return grad_oracle(model, batch, loss_fn, chunk=chunk)


class LocalClients:
    """Clients ``ids`` running ``method`` in this process on one model replica, whose parameters
    take the broadcast point for every evaluation; ``accumulate(model, shard, indices)`` leaves
    the gradient of the mean loss over ``shard[indices]`` (all of it for None) in them and
    returns that loss. Each client keeps its own method state between rounds."""

    def __init__(self, method: Method, model: Any, shards: Sequence[Any], accumulate: Accumulate,
                 ids: Iterable[int]) -> None:
        self.method, self.model, self.shards, self.accumulate = method, model, shards, accumulate
        self.ids = list(ids)
        self.states: dict[int, dict[str, Any]] = {i: {} for i in self.ids}
        self.params = model.parameter_vector()
        self._values = self.params.numpy("values", writable=True) if self.params.contiguous else None

    def shard_size(self, i: int) -> int:
        return len(self.shards[i])

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
            loss = self.accumulate(self.model, self.shards[i], indices)
        return loss, np.array(self.params.numpy("grads"), dtype=np.float64)

    def run(self, ctx: Round, participants: Iterable[int], evaluate: bool) -> list[Reply]:
        """The round for these clients: participants compute their messages; with ``evaluate``
        every client also reports its full local loss and gradient at x."""
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

    def state_of(self, i: int) -> dict[str, Any]:
        return self.states[i]

    def get_states(self) -> dict[int, dict[str, Any]]:
        """Every hosted client's method state (for a checkpoint)."""
        return self.states

    def load_states(self, states: dict[int, dict[str, Any]]) -> None:
        """Replaces the hosted clients' states (from a checkpoint); every hosted id must be there."""
        missing = [i for i in self.ids if i not in states]
        if missing:
            raise ValueError(f"the checkpoint has no state for clients {missing[:5]}")
        self.states = {i: states[i] for i in self.ids}

    def resident_bytes(self) -> int:
        """Bytes of the clients' method vectors (numpy arrays in their states)."""
        return sum(v.nbytes for s in self.states.values() for v in s.values() if isinstance(v, np.ndarray))


class Server:
    """The server's side of ``method``'s rounds from ``x0``: the point, the method's server state
    (``server``), the round index and the communication and oracle counters.

    The method is bound to the problem (``bind``: compressor, participation, batch, step size)
    before anything else, so a bad combination fails here."""

    def __init__(self, method: Method, x0: np.ndarray, shard_sizes: Sequence[int], participation: float = 1.0,
                 smoothness: Smoothness | None = None, seed: int | None = None) -> None:
        if not isinstance(method, Method):
            raise TypeError(f"expected a burtorch Method (burtorch.optim.methods), got {type(method).__name__}")
        self.method = method
        self.seed = next_seed() if seed is None else int(seed)
        self.n = len(shard_sizes)
        self.x = x0
        self.d = len(x0)
        method.bind(self.d, self.n, participation, smoothness, shard_sizes)
        self.server = method.server_start(self.x)
        self.x_prev: np.ndarray | None = None
        self.t = 0
        self.total_bits = 0
        self.total_bits_down = 0
        self.total_floats = 0
        self.total_samples = 0

    def open_round(self) -> Round:
        """Moves the point (after round 0), tosses the round's coin and returns the broadcast."""
        t = self.t
        if t > 0:
            self.x_prev = self.x
            self.x = self.method.advance(self.x, self.server)
        coin = self.method.draw_coin(self.seed, t) if t > 0 else None
        return Round(t, self.x, self.x_prev if self.method.uses_previous_point else None, coin, self.seed, self.n)

    def close_round(self, ctx: Round, replies: list[Reply], seconds: float = 0.0) -> dict[str, Any]:
        """Absorbs the participants' messages, counts them and ends the round; returns its record."""
        messages = [r for r in replies if r.message is not None]
        sent = [r.message for r in messages if r.message is not None]
        self.x = self.method.absorb(self.x, self.server, messages, ctx)
        bits = sum(m.bits for m in sent)
        self.total_bits += bits
        bits_down = self.method.downlink_bits(self.d, self.server) * len(messages)
        self.total_bits_down += bits_down
        self.total_floats += sum(m.floats for m in sent)
        self.total_samples += sum(r.samples for r in messages)
        oracle_losses = [r.loss for r in messages if r.loss is not None]
        record: dict[str, Any] = {"round": ctx.t, "participants": len(messages), "bits": bits,
                                  "bits_per_client": self.total_bits / self.n, "bits_down": bits_down,
                                  "bits_down_per_client": self.total_bits_down / self.n, "seconds": seconds,
                                  "oracle_loss": sum(oracle_losses) / len(oracle_losses) if oracle_losses else None}
        if ctx.coin is not None:
            record["coin"] = bool(ctx.coin)
        self.t += 1
        return record
