"""DIANA (Mishchenko, Gorbunov, Takac, Richtarik 2019): compressed gradient differences to
learned shifts.

Client i keeps a shift h_i (0 at the start); the server keeps h = mean_i h_i:

    m_i      = Q(grad f_i(x_t) - h_i)            (sent)
    h_i     <- h_i + a m_i
    g_t      = h + mean_i m_i,    h <- h + a mean_i m_i
    x_{t+1}  = x_t - lr * g_t

Q is unbiased with variance omega. The shift step defaults to the paper's a = 1 / (omega + 1).
The step lr has to be given: DIANA's nonconvex theorem ties it to constants this simulation does
not know (its analysis is for the proximal setting with extra assumptions).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compressors import Compressor
from .base import Method, check_lr, mean_of

if TYPE_CHECKING:
    from ..compressors import Message
    from ..rounds import Oracle, Reply, Round


class DIANA(Method):
    name = "diana"
    compressor_kind = "unbiased"
    refuses_partial = "the server's shift h stays the mean of the clients' h_i only when every client sends"

    def __init__(self, lr: float | None = None, compressor: Compressor | None = None, shift_lr: float | None = None,
                 batch: int | None = None) -> None:
        super().__init__(lr, compressor, batch=batch)
        self.shift_lr = check_lr(shift_lr, "shift_lr")

    def _bind_defaults(self, n: int, participation: float, shard_sizes: Sequence[int]) -> None:
        if self.shift_lr is None:
            self.shift_lr = 1.0 / (self.omega + 1.0)

    def server_start(self, x: np.ndarray) -> dict[str, Any]:
        return {"g": None, "h": np.zeros(len(x))}

    def client(self, state: dict[str, Any], oracle: Oracle, ctx: Round) -> Message:
        _, grad = self.local_gradient(oracle)
        h = state.setdefault("h", np.zeros(len(grad)))
        msg = self.send(grad - h, oracle)
        msg.add_to(h, self.shift_lr)
        return msg

    def absorb(self, x: np.ndarray, server: dict[str, Any], replies: list[Reply], ctx: Round) -> np.ndarray:
        mean = mean_of(replies, len(replies), len(x))
        server["g"] = server["h"] + mean
        server["h"] = server["h"] + self.shift_lr * mean
        return x

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "shift_lr": self.shift_lr}
