"""The framework-neutral half of W4 / W5: data, batches, initial weights and the first-step check.

A framework supplies four functions on a subclass: ``to_params`` (numpy dict -> its params),
``to_batch`` (numpy x, y -> its arrays), ``step`` (params, batch -> params, loss handle; the timed
work) and ``loss_of`` (params, batch -> float, untimed). Everything else is shared, so every peer
trains from the same weights on the same batches.
"""
from __future__ import annotations

import math
from typing import Any

from .. import data as bdata
from ..specs import (
    GPT_BLOCK,
    GPT_DMODEL,
    GPT_FF,
    GPT_LAYERS,
    MLP_BLOCK,
    MLP_EMBED_DIM,
    gpt_param_count,
    mlp_param_count,
)


class TrainRunner:
    timed_region = "forward + backward of the mean loss + SGD update (batch prepared before)"

    def __init__(self, workload: str, config: dict):
        b = int(config["b"])
        count = 1 + int(config["warmup"]) + int(config["reps"]) * int(config["n"])
        if workload == "mlp":
            e = int(config["e"])
            X, Y, vocab, source = bdata.mlp_dataset(MLP_BLOCK, config.get("data"))
            np_params = bdata.mlp_init(vocab, MLP_EMBED_DIM, MLP_BLOCK, e)
            np_batches = bdata.mlp_batches(X, Y, b, count)
            expected = mlp_param_count(vocab, e)
        elif workload == "gpt":
            tokens, vocab, source = bdata.gpt_dataset(config.get("data"))
            np_params = bdata.gpt_init(vocab, GPT_BLOCK, GPT_DMODEL, GPT_LAYERS, GPT_FF)
            np_batches = bdata.gpt_batches(tokens, GPT_BLOCK, b, count)
            expected = gpt_param_count(vocab)
        else:
            raise ValueError(f"not a training workload: {workload!r}")
        n_params = sum(int(p.size) for p in np_params.values())
        if n_params != expected:
            raise AssertionError(f"{workload}: {n_params} parameters, the paper's configuration has {expected}")
        self.workload, self.vocab = workload, vocab
        self.info = {"parameters": n_params, "vocab": vocab, "data": source}
        self.params = self.to_params(np_params)
        self.batches = [self.to_batch(x, y) for x, y in np_batches]
        self._cursor = 0
        self._first_loss: Any = None  # the framework's own loss object of the first step
        self._loss_before: float | None = None
        self._loss_after: float | None = None

    # --- supplied by each framework -------------------------------------------------------
    def to_params(self, np_params: dict):
        raise NotImplementedError

    def to_batch(self, x, y):
        raise NotImplementedError

    def step(self, params, batch):
        raise NotImplementedError

    def loss_of(self, params, batch) -> float:
        raise NotImplementedError

    def scalar(self, loss) -> float:
        return float(loss)

    # --- shared ---------------------------------------------------------------------------
    def run(self, phase: str, n: int) -> None:
        for _ in range(n):
            batch = self.batches[self._cursor]
            self._cursor += 1
            self.params, loss = self.step(self.params, batch)
            if self._first_loss is None:
                self._first_loss = loss

    def after_first_step(self) -> None:
        """Untimed: the loss of batch 0 before its step (from the step) and after it."""
        self._loss_before = self.scalar(self._first_loss)
        self._loss_after = self.loss_of(self.params, self.batches[0])

    def numbers(self) -> dict:
        return {"loss before": self._loss_before, "loss after": self._loss_after,
                "ln V": math.log(self.vocab)}
