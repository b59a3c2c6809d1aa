"""EF21: error feedback, fixed (Richtarik, Sokolov, Fatkhullin, NeurIPS 2021), with its stochastic
and partial-participation variants EF21-SGD and EF21-PP (Fatkhullin, Sokolov, Gorbunov, Li,
Richtarik 2021, "EF21 with bells & whistles").

Client i keeps g_i; the server keeps g = (1/n) sum_i g_i:

    x_{t+1}   = x_t - lr * g_t
    c_i       = C(grad f_i(x_{t+1}) - g_i)         clients in S_t (all of them without PP)
    g_i      <- g_i + c_i
    g_{t+1}   = g_t + (1/n) sum_{i in S_t} c_i

C is contractive with constant alpha. Round 0 initialises g_i = grad f_i(x_0), sent whole
(init="full"; d floats), or g_i = C(grad f_i(x_0)) (init="compressed"), by every client.
EF21-SGD replaces grad f_i by a minibatch gradient of ``batch`` samples.

Theory step (EF21, Theorem 1): lr = 1 / (L + L~ sqrt(beta / theta)), theta = 1 - sqrt(1 - alpha),
beta = (1 - alpha) / theta, L~ = sqrt(mean_i L_i^2). With alpha = 1 this is GD's 1/L.
EF21-PP: a client takes part with probability p, so the expected error of its g_i contracts by
(1 - p) + p (1 - alpha) = 1 - p alpha per round; EF21's proof then holds with alpha replaced by
p alpha, which gives the same formula with alpha -> p alpha. EF21-SGD's theorem has the same
form up to the minibatch variance (it converges to a neighbourhood); the default is EF21's step.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compressors import Compressor
from .base import Method, mean_of

if TYPE_CHECKING:
    from ..compressors import Message
    from ..rounds import Oracle, Reply, Round, Smoothness


def ef21_lr(L: float, L_tilde: float, alpha: float) -> float:
    if alpha >= 1.0:
        return 1.0 / L
    theta = 1.0 - math.sqrt(1.0 - alpha)
    beta = (1.0 - alpha) / theta
    return 1.0 / (L + L_tilde * math.sqrt(beta / theta))


class EF21(Method):
    name = "ef21"
    compressor_kind = "contractive"
    partial_participation = True
    full_first_round = True

    def __init__(self, lr: float | None = None, compressor: Compressor | None = None, batch: int | None = None,
                 init: str = "full") -> None:
        super().__init__(lr, compressor, batch=batch)
        if init not in ("full", "compressed"):
            raise ValueError(f"init must be 'full' or 'compressed', got {init!r}")
        self.init = init

    def theory_lr(self, sm: Smoothness, n: int, participation: float) -> float | None:
        return ef21_lr(sm.L, sm.L_tilde, self.alpha * participation)

    def client(self, state: dict[str, Any], oracle: Oracle, ctx: Round) -> Message:
        _, grad = self.local_gradient(oracle)
        if "g" not in state:
            if self.init == "full":
                msg = self.send_full(grad)
                state["g"] = msg.dense()
                return msg
            msg = self.send(grad, oracle)
            state["g"] = msg.dense()
            return msg
        msg = self.send_difference(grad, state["g"], oracle)
        msg.add_to(state["g"])
        return msg

    def absorb(self, x: np.ndarray, server: dict[str, Any], replies: list[Reply], ctx: Round) -> np.ndarray:
        n = ctx.n_clients
        if server["g"] is None:
            server["g"] = mean_of(replies, n, len(x))
        else:
            server["g"] = server["g"] + mean_of(replies, n, len(x))
        return x

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "init": self.init}
