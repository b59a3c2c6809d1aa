"""MARINA and VR-MARINA (Gorbunov, Burlachenko, Li, Richtarik, ICML 2021), and PAGE (Li, Bao,
Zhang, Richtarik, ICML 2021) as VR-MARINA without compression.

    x_{t+1} = x_t - lr * g_t
    one coin c_t ~ Bernoulli(p) for all clients (drawn by the server):
      c_t = 1:  client i sends grad f_i(x_{t+1})                            (d floats)
      c_t = 0:  client i sends Q(Delta_i),  g_{t+1} = g_t + mean_i Q(Delta_i)
    MARINA:     Delta_i = grad f_i(x_{t+1}) - grad f_i(x_t)   (full local gradients)
    VR-MARINA:  Delta_i = grad_B f_i(x_{t+1}) - grad_B f_i(x_t), one fresh minibatch B of
                ``batch`` samples at both points
    g_0 = mean_i grad f_i(x_0).

Q is unbiased with variance omega, independent across clients (each draws its own seed).
MARINA's client keeps its last full gradient, so a compressed round costs one gradient, not two.
Defaults: p = (bits of a compressed message) / (bits of a full one) for MARINA; for VR-MARINA
and PAGE p = b / (m + b), m the mean shard size (PAGE's choice).

Theory steps: MARINA (Theorem 2.1) lr = 1 / (L + L~ sqrt((1 - p) omega / (p n))); VR-MARINA
(Theorem 3.1) lr = 1 / (L + sqrt((1 - p) / (p n) (omega L~^2 + (1 + omega) L_max^2 / b))), with
the largest single-sample smoothness constant L_max bounding the paper's L_pm. PAGE (n = 1,
omega = 0) gives PAGE's Theorem 1 step 1 / (L (1 + sqrt((1 - p) / (p b)))).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import streams
from ..compressors import Compressor, Identity
from .base import Method, check_probability, check_wire_bits, mean_of

if TYPE_CHECKING:
    from ..compressors import Message
    from ..rounds import Oracle, Reply, Round, Smoothness


class MARINA(Method):
    name = "marina"
    compressor_kind = "unbiased"
    full_first_round = True
    refuses_partial = ("g is a running sum of every client's gradient differences, and a client that skips "
                       "a round loses its difference for good (the paper's PP-MARINA, which samples clients "
                       "in the compressed rounds only, is not implemented)")

    def __init__(self, lr: float | None = None, compressor: Compressor | None = None, p: float | None = None,
                 batch: int | None = None) -> None:
        super().__init__(lr, compressor, batch=batch)
        self.p = check_probability("p", p)
        self.uses_previous_point = batch is not None

    def _bind_defaults(self, n: int, participation: float, shard_sizes: Sequence[int]) -> None:
        if self.p is None:
            if self.batch is None:
                c = self.bound_compressor
                self.p = min(1.0, c.bits / (c.d * self.float_bits))
            else:
                m = sum(shard_sizes) / len(shard_sizes)
                self.p = self.batch / (m + self.batch)

    def theory_lr(self, sm: Smoothness, n: int, participation: float) -> float | None:
        p, omega = self.p, self.omega
        if self.batch is None:
            return 1.0 / (sm.L + sm.L_tilde * math.sqrt((1.0 - p) * omega / (p * n)))
        spread = omega * sm.L_tilde ** 2 + (1.0 + omega) * sm.L_max ** 2 / self.batch
        return 1.0 / (sm.L + math.sqrt((1.0 - p) / (p * n) * spread))

    def draw_coin(self, seed: int, t: int) -> bool | None:
        # tossed every round, so the stream does not depend on p
        return streams.rng(seed, streams.COIN, t).random() < self.p

    def client(self, state: dict[str, Any], oracle: Oracle, ctx: Round) -> Message:
        if ctx.t == 0 or ctx.coin:
            _, grad = oracle.full()
            if self.batch is None:
                state["grad"] = grad
            return self.send_full(grad)
        if self.batch is None:
            _, grad = oracle.full()
            delta = grad - state["grad"]
            state["grad"] = grad
        else:
            if ctx.x_prev is None:  # the server sends it to methods with uses_previous_point
                raise ValueError("VR-MARINA's round came without the previous point")
            indices = oracle.minibatch_indices(self.batch)
            _, new = oracle.gradient(ctx.x, indices)
            _, old = oracle.gradient(ctx.x_prev, indices)
            delta = new - old
        return self.send(delta, oracle)

    def absorb(self, x: np.ndarray, server: dict[str, Any], replies: list[Reply], ctx: Round) -> np.ndarray:
        mean = mean_of(replies, len(replies), len(x))
        full = ctx.t == 0 or ctx.coin
        server["g"] = mean if full else server["g"] + mean
        server["full_rounds"] = server.get("full_rounds", 0) + (1 if full and ctx.t > 0 else 0)
        return x

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "p": self.p}


class PAGE(MARINA):
    name = "page"

    def __init__(self, lr: float | None = None, batch: int | None = None, p: float | None = None,
                 float_bits: int = 32) -> None:
        if batch is None:
            raise ValueError("page needs a minibatch size (batch)")
        super().__init__(lr, None, p, batch)
        self.float_bits = check_wire_bits(float_bits)

    def bind(self, d: int, n: int, participation: float, smoothness: Smoothness | None,
             shard_sizes: Sequence[int]) -> None:
        self.compressor = Identity(d, self.float_bits)
        super().bind(d, n, participation, smoothness, shard_sizes)

    def send(self, v: np.ndarray, oracle: Oracle) -> Message:
        return self.send_full(v)

    def settings(self) -> dict[str, Any]:
        out = super().settings()
        out.pop("compressor", None)
        return out
