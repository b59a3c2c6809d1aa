"""MLX on the CPU (mlx-cpu on Linux): eager (lazy graph, evaluated every step) and mx.compile."""
from __future__ import annotations

from functools import partial
from typing import Any

import mlx.core as mx
from mlx.utils import tree_map

from burtorch.paper_graphs import w1_expr, w2_expr

from ..specs import GPT_LR, MLP_LR
from . import Unavailable, array_models
from .training import TrainRunner

mx.set_default_device(mx.cpu)


def versions() -> dict:
    from importlib.metadata import version  # mlx.core declares no __version__ to type checkers

    return {"mlx": version("mlx")}


# --- W1 / W2 ----------------------------------------------------------------------------------

w1_forward = w1_expr


def relu(x):
    return mx.maximum(x, 0.0)


def w2_forward(a, b):
    return w2_expr(a, b, relu)[-1]


class GraphRunner:
    timed_region = ("mx.value_and_grad(f, argnums=[0, 1])(a, b) with fresh FP64 mx.array leaves + "
                    "mx.eval per iteration")

    def __init__(self, forward, leaves):
        self._fn = mx.value_and_grad(forward, argnums=[0, 1])
        self._leaves = leaves
        self._last: Any = None  # set by run(), read after it

    def run(self, phase: str, n: int) -> None:
        fn, (a0, b0), array, f64, ev = self._fn, self._leaves, mx.array, mx.float64, mx.eval
        for _ in range(n):
            g, grads = fn(array(a0, dtype=f64), array(b0, dtype=f64))
            ev(g, grads)
        self._last = (g, grads)

    def numbers(self) -> dict:
        g, (da, db) = self._last
        return {"g": g.item(), "dg/da": da.item(), "dg/db": db.item()}


# --- W4 / W5 ----------------------------------------------------------------------------------

_OPS = array_models.ops(mx, lambda z: mx.softmax(z, axis=-1),
                        lambda z: z - mx.logsumexp(z, axis=-1, keepdims=True))


class MlxTrainRunner(TrainRunner):
    def __init__(self, workload, variant, config):
        loss_fn = partial(array_models.mlp_loss if workload == "mlp" else array_models.gpt_loss, _OPS)
        lr = MLP_LR if workload == "mlp" else GPT_LR
        grad_fn = mx.value_and_grad(loss_fn)

        def step(params, x, y):
            loss, grads = grad_fn(params, x, y)
            return tree_map(lambda p, g: p - lr * g, params, grads), loss

        self._step = mx.compile(step) if variant == "compile" else step
        self._loss = loss_fn
        self.timed_region = f"{variant} step: value_and_grad + SGD tree_map + mx.eval"
        super().__init__(workload, config)

    def to_params(self, np_params):
        return {k: mx.array(v) for k, v in np_params.items()}

    def to_batch(self, x, y):
        xb, yb = mx.array(x.astype("int32")), mx.array(y.astype("int32"))
        mx.eval(xb, yb)
        return xb, yb

    def step(self, params, batch):
        params, loss = self._step(params, *batch)
        mx.eval(params, loss)
        return params, loss

    def scalar(self, loss):
        return loss.item()

    def loss_of(self, params, batch):
        return self._loss(params, *batch).item()


def make_runner(workload: str, variant: str, config: dict):
    if workload in ("tiny", "small"):
        if variant != "eager":
            raise Unavailable("mx.compile variant implemented for W4/W5 only")
        forward, leaves = (w1_forward, (-41.0, 2.0)) if workload == "tiny" else (w2_forward, (-4.0, 2.0))
        return GraphRunner(forward, leaves)
    if workload in ("mlp", "gpt"):
        return MlxTrainRunner(workload, variant, config)
    raise Unavailable(f"mlx does not implement workload {workload!r} here")
