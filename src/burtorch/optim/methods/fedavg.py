"""FedAvg, local training with server averaging (McMahan, Moore, Ramage, Hampson, Aguera y Arcas
2017), the practitioners' baseline, with a local optimizer and a step-size schedule:

    each client i in S_t:  y = x_t;  K = local_steps local steps of the local optimizer on f_i from y
                           at the step lr_t, sends Delta_i = x_t - y                   (d floats)
    server:                x_{t+1} = x_t - server_lr * mean_{i in S_t} Delta_i

local_optimizer "sgd":   y <- y - lr_t * grad_B f_i(y)
local_optimizer "adam":  m <- b1 m + (1 - b1) g,  v <- b2 v + (1 - b2) g^2,
                         y <- y - lr_t * (m / (1 - b1^k)) / (sqrt(v / (1 - b2^k)) + eps)   (step k = 1..K)
                         with m = v = 0 at the start of every round: a client's moments were taken at
                         points the server has since moved from, and a client sampled rarely would
                         carry them over many rounds (the FedOpt papers' clients also start afresh).

The schedule sets lr_t from the round t:
    "constant": lr;   "step": lr * decay^(t // period);
    "cosine":   lr * (1 + cos(pi * min(t, period) / period)) / 2   (period: the run's rounds).

B is a fresh minibatch of ``batch`` samples per local step (the full shard when batch is None).
With client sampling by importance the server's mean is the reweighted (1/n) sum Delta_i / p_i.
There is no theoretical step size for heterogeneous nonconvex problems; lr has to be given.
With one full-batch SGD step, a constant schedule and server_lr = 1 this is GD.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Method, check_lr, participant_mean

if TYPE_CHECKING:
    from ..compressors import Message
    from ..rounds import Oracle, Reply, Round

LOCAL_OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "step", "cosine")


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


class FedAvg(Method):
    name = "fedavg"
    partial_participation = True

    def __init__(self, lr: float | None = None, local_steps: int = 5, batch: int | None = None,
                 server_lr: float = 1.0, float_bits: int = 32, local_optimizer: str = "sgd",
                 schedule: str = "constant", period: int | None = None, decay: float = 0.5,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(lr, None, float_bits=float_bits, batch=batch)
        self.local_steps = _positive_int("local_steps", local_steps)
        self.server_lr = check_lr(server_lr, "server_lr")
        if local_optimizer not in LOCAL_OPTIMIZERS:
            raise ValueError(f"unknown local optimizer {local_optimizer!r}; choose from {', '.join(LOCAL_OPTIMIZERS)}")
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}; choose from {', '.join(SCHEDULES)}")
        if schedule != "constant" and period is None:
            raise ValueError(f"the {schedule} schedule needs its period in rounds (the run's rounds for cosine)")
        self.local_optimizer, self.schedule = local_optimizer, schedule
        self.period = None if period is None else _positive_int("period", period)
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay!r}")
        self.decay = float(decay)
        b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1) or not (isinstance(eps, (int, float)) and eps > 0):
            raise ValueError(f"Adam needs betas in [0, 1) and eps > 0, got betas={betas!r}, eps={eps!r}")
        self.betas, self.eps = (float(b1), float(b2)), float(eps)

    def round_lr(self, t: int) -> float:
        """The local step of round t under the schedule."""
        if self.schedule == "constant":
            return self.lr
        assert self.period is not None  # __init__ checked
        if self.schedule == "step":
            return self.lr * self.decay ** (t // self.period)
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * min(t, self.period) / self.period))

    def client(self, state: dict[str, Any], oracle: Oracle, ctx: Round) -> Message:
        lr = self.round_lr(ctx.t)
        y = ctx.x.copy()
        adam = self.local_optimizer == "adam"
        if adam:
            m, v = np.zeros_like(y), np.zeros_like(y)
            b1, b2 = self.betas
        for step in range(self.local_steps):
            indices = None if self.batch is None else oracle.minibatch_indices(self.batch, key=step)
            _, grad = oracle.gradient(y, indices)
            if adam:
                m = b1 * m + (1.0 - b1) * grad
                v = b2 * v + (1.0 - b2) * grad * grad
                k = step + 1
                y -= lr * (m / (1.0 - b1 ** k)) / (np.sqrt(v / (1.0 - b2 ** k)) + self.eps)
            else:
                y -= lr * grad
        return self.send(ctx.x - y, oracle)

    def advance(self, x: np.ndarray, server: dict[str, Any]) -> np.ndarray:
        return x

    def absorb(self, x: np.ndarray, server: dict[str, Any], replies: list[Reply], ctx: Round) -> np.ndarray:
        return x - self.server_lr * participant_mean(replies, ctx, len(x))

    def settings(self) -> dict[str, Any]:
        out = {**super().settings(), "local_steps": self.local_steps, "server_lr": self.server_lr,
               "local_optimizer": self.local_optimizer, "schedule": self.schedule}
        if self.schedule != "constant":
            out["period"] = self.period
        if self.schedule == "step":
            out["decay"] = self.decay
        return out
