"""burtorch's recorded programs on the bench workloads: W1/W2 traced once and replayed over all
iterations by one .map call; W4/W5 through grad_oracle(model, batch, compile=True), per sample or
per chunk; and the planned step (SGD.train_step), which chooses among every path itself."""
from __future__ import annotations

import burtorch as bt
from burtorch.paper_graphs import w1_expr, w2_expr

from ..specs import replay_chunk
from .impl_burtorch import BurtorchTrainRunner, _models, versions  # noqa: F401  (versions: read by the harness)


class CompiledGraphRunner:
    """W1 / W2: value_and_grad(expr) traced on the first call; each run is one .map over n rows."""

    timed_region = "an (n, 2) array of the leaves' values + one value_and_grad(...).map call (n samples)"

    def __init__(self, expr, leaves):
        import numpy as np

        self._np = np
        self._f = bt.value_and_grad(expr, argnums=(0, 1))
        self._f(*leaves)  # the trace, outside the timed region
        self._leaves = leaves
        self._last: tuple[float, float, float] | None = None

    def run(self, phase: str, n: int) -> None:
        X = self._np.tile(self._np.asarray(self._leaves, dtype=self._np.float64), (n, 1))
        values, grads = self._f.map(X)
        self._last = (float(values[-1]), float(grads[-1, 0]), float(grads[-1, 1]))

    def numbers(self) -> dict:
        assert self._last is not None, "numbers() comes after run()"
        g, da, db = self._last
        return {"g": g, "dg/da": da, "dg/db": db}


def _w2_root(a, b):
    return w2_expr(a, b)[-1]


class CompiledTrainRunner(BurtorchTrainRunner):
    timed_region = ("grad_oracle(model, batch, compile=True): per sample shape one trace (first step), "
                    "every sample replayed natively with seed 1/b; then SGD.step()")

    def step(self, params, batch):
        loss = self._oracle(self.model, batch, compile=True, threads=self._threads)
        self._opt.step()
        return params, loss


class CompiledChunkRunner(BurtorchTrainRunner):
    """Chunks of about 64 rows (specs.replay_chunk), each one replay of the program of loss_batch
    over a chunk: no Python per chunk, and with two threads each thread replays its own chunks
    (the layers' weights read once per chunk)."""

    timed_region = ("grad_oracle(model, batch, compile=True, chunk=k): k = max(1, min(64 // rows per sample, "
                    "b // threads)) (W4 64, W5 8 samples at most); per chunk shape one trace of loss_batch (first "
                    "step), every chunk replayed natively with seed k/b, threads replaying blocks of chunks; then "
                    "SGD.step()")

    def step(self, params, batch):
        chunk = replay_chunk(self.workload, len(batch), self._threads)
        loss = self._oracle(self.model, batch, compile=True, chunk=chunk, threads=self._threads)
        self._opt.step()
        return params, loss


class CompiledChunkFusedRunner(CompiledChunkRunner):
    """The same chunks stepped by SGD.fused_step: with the batch one chunk, the linear weights'
    update inside the sweep; with several chunks on two threads, the step taken in the pass that
    adds the threads' gradients."""

    timed_region = ("SGD.fused_step(model, batch, chunk=k, compile=True), k as burtorch-compiled-chunk's: one chunk "
                    "(k = b): replayed with the linear weights' SGD update inside the sweep; several chunks on two "
                    "threads: each thread replays its block of chunks natively and the SGD step is taken in the pass "
                    "that adds the threads' gradients; several chunks on one thread: as burtorch-compiled-chunk")

    def step(self, params, batch):
        chunk = replay_chunk(self.workload, len(batch), self._threads)
        return params, self._opt.fused_step(self.model, batch, chunk=chunk, threads=self._threads, compile=True)


class PlannedRunner(BurtorchTrainRunner):
    """The default a user gets: SGD.train_step(model, batch), the plan chosen by timing the ways a
    step can run on its first call (within the default memory budget, on 1 thread and the
    configuration's count), kept for the rest of the run."""

    timed_region = ("SGD.train_step(model, batch): the planned step (burtorch.planner), chosen on the first "
                    "call (a warm-up step) among eager / compiled, chunk sizes, fused SGD and 1 or the "
                    "configuration's threads; every later step runs that plan")

    def step(self, params, batch):
        return params, self._opt.train_step(self.model, batch)


def make_runner(workload: str, variant: str, config: dict):
    if workload == "tiny":
        return CompiledGraphRunner(w1_expr, (-41.0, 2.0))
    if workload == "small":
        return CompiledGraphRunner(_w2_root, (-4.0, 2.0))
    if workload in ("mlp", "gpt"):
        runner = {"compiled-chunked": CompiledChunkRunner, "planned": PlannedRunner,
                  "compiled-chunked-fused": CompiledChunkFusedRunner}.get(variant, CompiledTrainRunner)
        return runner(workload, config, _models())
    raise ValueError(f"burtorch-compiled does not implement workload {workload!r}")
