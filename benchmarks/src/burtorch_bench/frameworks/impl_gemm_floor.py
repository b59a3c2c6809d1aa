"""The GEMM floor of a W4 step: its six matrix products as float32 GEMMs through numpy's BLAS,
and nothing else: no activation, no loss, no update. A trainer's time over this row's is how far
it is from the machine's floor. The harness holds the BLAS to the row's thread count: one, or
with `--threads 1,2` also two (then the row shows what a maintained BLAS gets from the second
core on the same products)."""
from __future__ import annotations

import numpy as np

from ..data import mlp_dataset
from ..specs import MLP_BLOCK, MLP_EMBED_DIM, config_threads


def versions() -> dict:
    return {"numpy": np.__version__}


class FloorRunner:
    timed_region = ("six float32 numpy.dot calls into preallocated outputs (BLAS at the row's thread count), "
                    "one step's shapes: "
                    "x W1^T, h W2^T (forward), gl^T h, gl W2, gh^T x, gh W1 (backward)")

    def __init__(self, config: dict):
        e, b = int(config["e"]), int(config["b"])
        _, _, vocab, source = mlp_dataset(MLP_BLOCK, config.get("data"))
        n_in = MLP_BLOCK * MLP_EMBED_DIM
        rng = np.random.default_rng(0)

        def mat(r, c):
            return rng.uniform(-1, 1, (r, c)).astype(np.float32)

        self.x, self.W1, self.W2, self.gl = mat(b, n_in), mat(e, n_in), mat(vocab, e), mat(b, vocab)
        self.h, self.logits, self.gh = mat(b, e), mat(b, vocab), mat(b, e)
        self.gW2, self.gW1, self.gx = mat(vocab, e), mat(e, n_in), mat(b, n_in)
        self.W1t, self.W2t, self.glt, self.ght = self.W1.T, self.W2.T, self.gl.T, self.gh.T
        self.info = {"vocab": vocab, "data": source, "BLAS threads": config_threads(config)}
        self._gflop = 2.0 * 3 * (b * n_in * e + b * e * vocab) / 1e9

    def run(self, phase: str, n: int) -> None:
        dot = np.dot
        for _ in range(n):
            dot(self.x, self.W1t, out=self.h)
            dot(self.h, self.W2t, out=self.logits)
            dot(self.glt, self.h, out=self.gW2)
            dot(self.gl, self.W2, out=self.gh)
            dot(self.ght, self.x, out=self.gW1)
            dot(self.gh, self.W1, out=self.gx)

    def numbers(self) -> dict:
        return {"gflop": self._gflop}


def make_runner(workload: str, variant: str, config: dict):
    if workload != "mlp":
        raise ValueError(f"the GEMM floor covers W4 only, not {workload!r}")
    return FloorRunner(config)
