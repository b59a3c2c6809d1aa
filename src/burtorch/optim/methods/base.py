"""What every federated method shares: binding to a problem, the server's step x <- x - lr g, and
averaging messages in client order.

A method is split in two halves that never share memory, so a client can run in another process
or on another machine:

* ``client(state, oracle, ctx)`` runs on the client: ``state`` is that client's own dict of
  vectors (kept between rounds where the client lives), ``oracle`` evaluates its local gradients,
  ``ctx`` is the round the server broadcast. It returns the Message the client sends.
* ``absorb(x, server, replies, ctx)`` runs on the server with the replies in client order and
  returns the new point; ``advance`` moves the point at the start of the next round.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import streams
from ..compressors import Compressor, Message, full_message

if TYPE_CHECKING:
    from ..rounds import Oracle, Reply, Round, Smoothness


# The checks return Any on purpose: lr, p, batch and the like are None until bind() fills them in,
# a two-phase set-up that annotations cannot express; the methods read them after bind().
def check_lr(lr: Any, name: str = "lr") -> Any:
    if lr is None:
        return None
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {lr!r}")
    return float(lr)


def check_probability(name: str, p: Any) -> Any:
    if p is None:
        return None
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
        raise ValueError(f"{name} must be a probability in (0, 1], got {p!r}")
    return float(p)


def check_batch(batch: Any) -> Any:
    if batch is None:
        return None
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    return batch


# The widths a message's values travel at: "fp32" values are rounded to float32 before anybody
# (the server, or the client's own copy of what it sent) uses them, and counted at 32 bits each.
WIRES = {"fp32": 32, "fp64": 64}


def check_wire_bits(bits: Any) -> int:
    if bits not in WIRES.values():
        raise ValueError(f"a federated message carries fp32 or fp64 values (float_bits 32 or 64), got {bits!r}")
    return int(bits)


def wire_bits(wire: Any) -> int:
    """The bits of one value on the wire named ``wire`` ("fp32" or "fp64")."""
    if wire not in WIRES:
        raise ValueError(f"unknown wire {wire!r}; choose from {', '.join(WIRES)}")
    return WIRES[wire]


def on_wire(msg: Message, float_bits: int, exact: bool = False) -> Message:
    """``msg`` with its values as they arrive: rounded to float32 on an fp32 wire (kept in float64
    arrays, so that later arithmetic stays in double precision). A value beyond float32's range
    arrives as an infinity, as it would over a real fp32 wire: the server's point then stops being
    finite and the run stops there as diverged, its records kept. ``exact`` methods (the
    single-process optimizers of burtorch.optim, which send nothing) keep their values."""
    if float_bits != 32 or exact:
        return msg
    with np.errstate(over="ignore"):
        rounded = msg.values.astype(np.float32)
    return Message(msg.d, rounded.astype(np.float64), msg.bits, msg.indices)


def mean_of(replies: Sequence[Reply], n: int, d: int) -> np.ndarray:
    """(1/n) * the sum of the replies' messages, summed in client order (bitwise reproducible); zero
    for a round without replies (Bernoulli sampling may choose nobody: nothing moves)."""
    acc = np.zeros(d)
    if not replies:
        return acc
    for r in replies:
        if r.message is None:
            raise ValueError(f"client {r.client} sent no message")
        r.message.add_to(acc)
    acc /= n
    return acc


def participant_mean(replies: Sequence[Reply], ctx: Round, d: int) -> np.ndarray:
    """The mean message of a round's participants S: (1/|S|) sum_S m_i, or, when clients were
    drawn by importance with probabilities p_i, the unbiased (1/n) sum_S m_i / p_i (in client
    order, bitwise reproducible)."""
    if ctx.probabilities is None:
        return mean_of(replies, len(replies), d)
    acc = np.zeros(d)
    for r in replies:
        if r.message is None:
            raise ValueError(f"client {r.client} sent no message")
        r.message.add_to(acc, 1.0 / ctx.probabilities[r.client])
    acc /= ctx.n_clients
    return acc


class Method:
    name = "method"
    compressor_kind: str | None = None   # None: sends full vectors; "any", "unbiased", "contractive"
    partial_participation = False        # may run with a fraction of the clients per round
    refuses_partial = "its update needs every client's message in every round"  # why, when it does
    full_first_round = False              # round 0 initialises every client's state
    uses_previous_point = False           # clients evaluate at the previous point too
    exact = False                         # True: values are not rounded to the wire (nothing is sent)

    def __init__(self, lr: float | None = None, compressor: Compressor | None = None, float_bits: int = 32,
                 batch: int | None = None) -> None:
        self.lr = check_lr(lr)
        if compressor is not None and not isinstance(compressor, Compressor):
            raise TypeError(f"expected a Compressor, got {type(compressor).__name__}")
        self.compressor = compressor
        self.float_bits = check_wire_bits(compressor.float_bits if compressor is not None else float_bits)
        self.batch = check_batch(batch)

    # ---- set-up, before any round ----
    def bind(self, d: int, n: int, participation: float, smoothness: Smoothness | None,
             shard_sizes: Sequence[int]) -> None:
        """Checks the method against the problem and fills in the theory's defaults."""
        c = self.compressor
        if self.compressor_kind is None and c is not None:
            raise ValueError(f"{self.name} sends uncompressed vectors; drop the compressor")
        if self.compressor_kind is not None:
            if c is None:
                raise ValueError(f"{self.name} needs a compressor")
            if c.d != d:
                raise ValueError(f"the compressor was built for d={c.d}, the model has {d} parameters")
            if self.compressor_kind == "unbiased" and not c.unbiased:
                raise ValueError(f"{self.name} needs an unbiased compressor (identity, randk, randseqk, natural, "
                                 f"dithering), got {type(c).__name__}")
            if self.compressor_kind == "contractive" and c.alpha is None:
                raise ValueError(f"{self.name} needs a contractive compressor (topk, identity, or scaled-NAME for "
                                 f"an unbiased one), got {type(c).__name__}")
        if participation < 1.0 and not self.partial_participation:
            raise ValueError(f"{self.name} runs with full participation only (participation=1): "
                             f"{self.refuses_partial}; ef21-pp, dcgd, gd and fedavg sample clients")
        if self.batch is not None and self.batch > min(shard_sizes):
            raise ValueError(f"batch={self.batch} is larger than the smallest client shard "
                             f"({min(shard_sizes)} samples)")
        self._bind_defaults(n, participation, shard_sizes)
        if self.lr is None:
            lr = self.theory_lr(smoothness, n, participation) if smoothness is not None else None
            if lr is None:
                why = ("this problem knows no smoothness constant" if smoothness is None
                       else f"{self.name} has no theoretical step size here")
                raise ValueError(f"{self.name} needs lr: {why}")
            self.lr = lr

    def _bind_defaults(self, n: int, participation: float, shard_sizes: Sequence[int]) -> None:
        pass

    def theory_lr(self, sm: Smoothness, n: int, participation: float) -> float | None:
        return None

    # ---- the compressor's constants, for the methods bind() checked to have a compressor ----
    @property
    def bound_compressor(self) -> Compressor:
        if self.compressor is None:
            raise ValueError(f"{self.name} needs a compressor")
        return self.compressor

    @property
    def omega(self) -> float:
        """omega of the compressor (unbiased ones only)."""
        omega = self.bound_compressor.omega
        if omega is None:
            raise ValueError(f"{self.name} needs an unbiased compressor")
        return omega

    @property
    def alpha(self) -> float:
        """alpha of the compressor (contractive ones only)."""
        alpha = self.bound_compressor.alpha
        if alpha is None:
            raise ValueError(f"{self.name} needs a contractive compressor")
        return alpha

    # ---- server ----
    def server_start(self, x: np.ndarray) -> dict[str, Any]:
        return {"g": None}

    def draw_coin(self, seed: int, t: int) -> bool | None:
        return None

    def downlink_bits(self, d: int, server: dict[str, Any]) -> int:
        """Bits the server sends each participant of the round just absorbed. By default the point
        itself, at fp64 (the clients evaluate at the server's exact x): 64 d. Methods that compress
        the broadcast (EF21-BC) count their message."""
        return 64 * d

    def advance(self, x: np.ndarray, server: dict[str, Any]) -> np.ndarray:
        """The point of the next round: x - lr * g."""
        return x if server["g"] is None else x - self.lr * server["g"]

    def absorb(self, x: np.ndarray, server: dict[str, Any], replies: list[Reply], ctx: Round) -> np.ndarray:
        raise NotImplementedError

    # ---- client ----
    def client(self, state: dict[str, Any], oracle: Oracle, ctx: Round) -> Message:
        raise NotImplementedError

    def send(self, v: np.ndarray, oracle: Oracle) -> Message:
        """v compressed with this round's client seed, or sent whole without a compressor, with
        its values as the wire carries them."""
        if self.compressor is None:
            return self.send_full(v)
        return on_wire(self.compressor.compress(v, self._message_seed(oracle)), self.float_bits, self.exact)

    def send_difference(self, a: np.ndarray, b: np.ndarray, oracle: Oracle) -> Message:
        """:meth:`send` of a - b, which the compressor may select from without writing it out."""
        if self.compressor is None:
            return self.send_full(a - b)
        return on_wire(self.compressor.compress_difference(a, b, self._message_seed(oracle)), self.float_bits,
                       self.exact)

    @staticmethod
    def _message_seed(oracle: Oracle) -> int:
        """The compressor's seed for this client's message of this round."""
        return streams.derive(oracle.seed, streams.COMPRESS, oracle.client, oracle.round)

    def send_full(self, v: np.ndarray) -> Message:
        """v sent whole (d values at the wire's width)."""
        return on_wire(full_message(v, self.float_bits), self.float_bits, self.exact)

    @property
    def wire(self) -> str:
        return "fp32" if self.float_bits == 32 else "fp64"

    def local_gradient(self, oracle: Oracle, key: int = 0) -> tuple[float, np.ndarray]:
        """The client's full local gradient, or a minibatch one when the method has a batch size."""
        if self.batch is None:
            return oracle.full()
        return oracle.minibatch(self.batch, key=key)

    # ---- description for logs and JSON ----
    def settings(self) -> dict[str, Any]:
        out = {"method": self.name, "lr": self.lr, "wire": self.wire}
        if self.compressor is not None:
            out["compressor"] = repr(self.compressor)
        if self.batch is not None:
            out["batch"] = self.batch
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v}' for k, v in self.settings().items() if k != 'method')})"
