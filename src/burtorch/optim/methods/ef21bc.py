"""EF21-BC: EF21 with bidirectional compression (Fatkhullin, Sokolov, Gorbunov, Li, Richtarik
2021, "EF21 with bells & whistles", Section on bidirectional compression). The clients' side is
EF21's; the server compresses its broadcast with a second contractive compressor C_M, with error
feedback on the server's side:

    x_{t+1}   = x_t - lr * b_t                     (server and clients alike, from b_t)
    c_i       = C(grad f_i(x_{t+1}) - g_i),  g_i <- g_i + c_i          (sent up)
    g_{t+1}   = g_t + (1/n) sum_i c_i
    s_t       = C_M(g_{t+1} - b_t),  b_{t+1} = b_t + s_t                (s_t sent down)

Round 0: g_i = grad f_i(x_0) sent whole, and b_0 = g_0 sent whole (init="full"), or both
compressed (init="compressed"). Every client keeps b (it needs every s_t), so all of them take
part in every round. The clients could step x from b themselves; this simulation sends them the
server's x, which is the same number, and counts the downlink as s_t's bits.

No theory step is given here: the paper's theorem ties the step to both compressors' alphas
through constants this simulation does not reproduce; give lr (or --tune a grid).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import streams
from ..compressors import Compressor, full_message
from .base import on_wire
from .ef21 import EF21

if TYPE_CHECKING:
    from ..rounds import Reply, Round, Smoothness


class EF21BC(EF21):
    name = "ef21-bc"
    partial_participation = False
    refuses_partial = "every client keeps the server's b and needs every downlink message to stay in step"

    def __init__(self, lr: float | None = None, compressor: Compressor | None = None,
                 downlink: Compressor | None = None, batch: int | None = None, init: str = "full") -> None:
        super().__init__(lr, compressor, batch=batch, init=init)
        if downlink is not None and not isinstance(downlink, Compressor):
            raise TypeError(f"downlink: expected a Compressor, got {type(downlink).__name__}")
        self.downlink = downlink

    def bind(self, d: int, n: int, participation: float, smoothness: Smoothness | None,
             shard_sizes: Sequence[int]) -> None:
        down = self.downlink
        if down is None:
            raise ValueError("ef21-bc needs a downlink compressor (the server's; --downlink)")
        if down.alpha is None:
            raise ValueError(f"ef21-bc's downlink compressor must be contractive (topk, identity, scaled-NAME), "
                             f"got {type(down).__name__}")
        if down.d != d:
            raise ValueError(f"the downlink compressor was built for d={down.d}, the model has {d} parameters")
        if down.float_bits != self.float_bits:
            raise ValueError(f"the downlink compressor counts {down.float_bits}-bit values, the uplink "
                             f"{self.float_bits}-bit ones: build both for the same wire")
        super().bind(d, n, participation, smoothness, shard_sizes)

    def theory_lr(self, sm: Smoothness, n: int, participation: float) -> float | None:
        return None

    def server_start(self, x: np.ndarray) -> dict[str, Any]:
        return {"g": None, "b": None, "down_bits": 0}

    def advance(self, x: np.ndarray, server: dict[str, Any]) -> np.ndarray:
        return x if server["b"] is None else x - self.lr * server["b"]

    def absorb(self, x: np.ndarray, server: dict[str, Any], replies: list[Reply], ctx: Round) -> np.ndarray:
        super().absorb(x, server, replies, ctx)
        down = self.downlink
        assert down is not None  # bind() checked
        seed = streams.derive(ctx.seed, streams.DOWNLINK, ctx.t)
        if server["b"] is None:
            first = full_message(server["g"], self.float_bits) if self.init == "full" else down.compress(server["g"],
                                                                                                          seed)
            msg = on_wire(first, self.float_bits, self.exact)
            server["b"] = msg.dense()
        else:
            msg = on_wire(down.compress(server["g"] - server["b"], seed), self.float_bits, self.exact)
            b = server["b"].copy()
            msg.add_to(b)
            server["b"] = b
        server["down_bits"] = msg.bits
        return x

    def downlink_bits(self, d: int, server: dict[str, Any]) -> int:
        return server["down_bits"]

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "downlink": repr(self.downlink)}
