"""Distributed gradient descent, uncompressed (GD) and compressed (DCGD).

    x_{t+1} = x_t - lr * g_t,    g_t = (1/|S_t|) sum_{i in S_t} C(grad f_i(x_t))

GD sends full local gradients (C = identity, d floats per client); its theory step is 1/L.
DCGD ("distributed compressed gradient descent", the baseline of Khirirat, Feyzmahdavian,
Johansson 2018 and of the EF21 paper) applies any compressor directly to the gradient: with an
unbiased one it is SGD with extra variance, with TopK it is biased and need not converge on
heterogeneous data (the EF21 paper's motivating failure); it has no step size of its own here.
With partial participation the mean runs over the round's participants S_t; with clients drawn
by importance (client i with probability p_i) it is the unbiased (1/n) sum_{i in S_t} m_i / p_i.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Method, participant_mean

if TYPE_CHECKING:
    from ..compressors import Message
    from ..rounds import Oracle, Reply, Round, Smoothness


class GD(Method):
    name = "gd"
    partial_participation = True

    def theory_lr(self, sm: Smoothness, n: int, participation: float) -> float | None:
        return 1.0 / sm.L if participation == 1.0 and self.batch is None else None

    def client(self, state: dict[str, Any], oracle: Oracle, ctx: Round) -> Message:
        _, grad = self.local_gradient(oracle)
        return self.send(grad, oracle)

    def absorb(self, x: np.ndarray, server: dict[str, Any], replies: list[Reply], ctx: Round) -> np.ndarray:
        server["g"] = participant_mean(replies, ctx, len(x))
        return x


class DCGD(GD):
    name = "dcgd"
    compressor_kind = "any"

    def theory_lr(self, sm: Smoothness, n: int, participation: float) -> float | None:
        return None
