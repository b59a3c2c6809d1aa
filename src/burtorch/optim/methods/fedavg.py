"""FedAvg, local SGD with server averaging (McMahan, Moore, Ramage, Hampson, Aguera y Arcas 2017),
the practitioners' baseline.

    each client i in S_t:  y = x_t;  repeat local_steps times:  y <- y - lr * grad_B f_i(y)
                           sends Delta_i = x_t - y                        (d floats)
    server:                x_{t+1} = x_t - server_lr * mean_{i in S_t} Delta_i

B is a fresh minibatch of ``batch`` samples per local step (the full shard when batch is None).
There is no theoretical step size for heterogeneous nonconvex problems; lr has to be given.
With one full-batch local step and server_lr = 1 this is GD.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Method, check_lr, participant_mean

if TYPE_CHECKING:
    from ..compressors import Message
    from ..rounds import Oracle, Reply, Round


class FedAvg(Method):
    name = "fedavg"
    partial_participation = True

    def __init__(self, lr: float | None = None, local_steps: int = 5, batch: int | None = None,
                 server_lr: float = 1.0, float_bits: int = 32) -> None:
        super().__init__(lr, None, float_bits=float_bits, batch=batch)
        if isinstance(local_steps, bool) or not isinstance(local_steps, int) or local_steps < 1:
            raise ValueError(f"local_steps must be a positive int, got {local_steps!r}")
        self.local_steps = local_steps
        self.server_lr = check_lr(server_lr, "server_lr")

    def client(self, state: dict[str, Any], oracle: Oracle, ctx: Round) -> Message:
        y = ctx.x.copy()
        for step in range(self.local_steps):
            indices = None if self.batch is None else oracle.minibatch_indices(self.batch, key=step)
            _, grad = oracle.gradient(y, indices)
            y -= self.lr * grad
        return self.send(ctx.x - y, oracle)

    def advance(self, x: np.ndarray, server: dict[str, Any]) -> np.ndarray:
        return x

    def absorb(self, x: np.ndarray, server: dict[str, Any], replies: list[Reply], ctx: Round) -> np.ndarray:
        return x - self.server_lr * participant_mean(replies, ctx, len(x))

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "local_steps": self.local_steps, "server_lr": self.server_lr}
