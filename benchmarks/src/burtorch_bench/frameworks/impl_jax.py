"""JAX on the CPU: eager (value_and_grad traced every call) and jit (compiled once, called per step)."""
from __future__ import annotations

import os
from functools import partial
from typing import Any

# One intra-op thread, set before jax is imported; the process is pinned to one core anyway.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from burtorch.paper_graphs import w1_expr, w2_expr  # noqa: E402

from ..specs import GPT_LR, MLP_LR  # noqa: E402
from . import Unavailable, array_models  # noqa: E402
from .training import TrainRunner  # noqa: E402


def versions() -> dict:
    import jaxlib
    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__}


# --- W1 / W2 ----------------------------------------------------------------------------------

w1_forward = w1_expr


def w2_forward(a, b):
    return w2_expr(a, b, jax.nn.relu)[-1]


class GraphRunner:
    def __init__(self, forward, leaves, variant):
        jax.config.update("jax_enable_x64", True)  # W1/W2 are FP64
        fn = jax.value_and_grad(forward, argnums=(0, 1))
        self._fn = jax.jit(fn) if variant == "jit" else fn
        self._leaves = tuple(jnp.float64(v) for v in leaves)
        self.timed_region = (f"{variant} jax.value_and_grad(f, argnums=(0, 1))(a, b) with fresh "
                             "FP64 leaves + block_until_ready per iteration")
        self._last: Any = None  # set by run(), read after it

    def run(self, phase: str, n: int) -> None:
        fn, (a0, b0), f64, ready = self._fn, self._leaves, jnp.float64, jax.block_until_ready
        for _ in range(n):
            out = ready(fn(f64(a0), f64(b0)))
        self._last = out

    def numbers(self) -> dict:
        g, (da, db) = self._last
        return {"g": float(g), "dg/da": float(da), "dg/db": float(db)}


# --- W4 / W5 ----------------------------------------------------------------------------------

_OPS = array_models.ops(jnp, lambda z: jax.nn.softmax(z, axis=-1), lambda z: jax.nn.log_softmax(z, axis=-1))


class JaxTrainRunner(TrainRunner):
    def __init__(self, workload, variant, config):
        loss_fn = partial(array_models.mlp_loss if workload == "mlp" else array_models.gpt_loss, _OPS)
        lr = MLP_LR if workload == "mlp" else GPT_LR

        def step(params, x, y):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

        self._step = jax.jit(step) if variant == "jit" else step
        self._loss = jax.jit(loss_fn)
        self.timed_region = (f"{variant} step: value_and_grad of the loss + SGD tree_map + "
                             "block_until_ready")
        super().__init__(workload, config)

    def to_params(self, np_params):
        return {k: jnp.asarray(v) for k, v in np_params.items()}

    def to_batch(self, x, y):
        return jax.block_until_ready((jnp.asarray(x, dtype=jnp.int32), jnp.asarray(y, dtype=jnp.int32)))

    def step(self, params, batch):
        return jax.block_until_ready(self._step(params, *batch))

    def loss_of(self, params, batch):
        return float(self._loss(params, *batch))


def make_runner(workload: str, variant: str, config: dict):
    if workload == "tiny":
        return GraphRunner(w1_forward, (-41.0, 2.0), variant)
    if workload == "small":
        return GraphRunner(w2_forward, (-4.0, 2.0), variant)
    if workload in ("mlp", "gpt"):
        return JaxTrainRunner(workload, variant, config)
    raise Unavailable(f"jax does not implement workload {workload!r} here")
