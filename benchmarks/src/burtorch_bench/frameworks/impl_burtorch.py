"""burtorch's side of the workloads: scalar Values in the thread's FP64 arena, rewound each iteration."""
from __future__ import annotations

import os
import tempfile
from typing import Any

import burtorch as bt
from burtorch.data import ArrayBatch
from burtorch.oracle import mean_loss
from burtorch.paper_graphs import w1_graph, w2_graph, w2_nodes

from ..specs import GPT_LR, MLP_LR, W3_NAMES, config_threads
from . import Unavailable
from .training import TrainRunner


def versions() -> dict:
    return {"burtorch": bt.__version__, "burtorch build": bt.build_info}


def _leaf_pair(graph):
    """A builder (a0, b0) -> (g, a, b) from a burtorch.paper_graphs graph (the paper's fixed leaves)."""
    def build(a0: float, b0: float):
        a, b, g = graph(bt.Value, a0, b0)
        g.backward()
        return g, a, b
    return build


_w1 = _leaf_pair(w1_graph)
_w2 = _leaf_pair(w2_graph)


class GraphRunner:
    """W1 / W2: every iteration builds from fresh leaves, sweeps back, and rewinds its nodes."""

    timed_region = "Value leaves + ops + g.backward() + bt.rewind(checkpoint) per iteration"

    def __init__(self, build, leaves):
        self._build = build
        self._leaves = leaves
        self._last: Any = None  # set by run(), read after it

    def run(self, phase: str, n: int) -> None:
        # Like the peers: the numbers are read once, from the last iteration, outside the loop.
        build, rewind, leaves = self._build, bt.rewind, self._leaves
        cp = bt.checkpoint()
        for _ in range(n - 1):
            build(*leaves)
            rewind(cp)
        g, a, b = build(*leaves)
        self._last = (g.data, a.grad, b.grad)
        rewind(cp)

    def numbers(self) -> dict:
        g, da, db = self._last
        return {"g": g, "dg/da": da, "dg/db": db}


class SaveLoadRunner:
    """W3 through bt.io.save / bt.io.load of a list of 7 Values (what='values').

    ``save_options`` go to every ``bt.io.save`` (``atomic``, ``durable``); the suite's W3 row uses
    ``durable=False``, as torch.save and np.save do not fsync either.
    """

    timed_region = ("bt.io.save(path, values, what='values', durable=False) / "
                    "bt.io.load(path, values, what='values')")

    def __init__(self, directory: str | None = None, **save_options):
        from burtorch import io as btio

        self._io = btio
        self._options = {"durable": False, **save_options}
        self._values = list(w2_nodes(bt.Value))
        self._expected = [v.data for v in self._values]
        fd, self.path = tempfile.mkstemp(prefix="burtorch-w3-", suffix=".bin", dir=directory)
        os.close(fd)
        self._io.save(self.path, self._values, what="values", **self._options)
        # Targets of the loads: 7 fresh nodes holding zeros, so a load that reads nothing shows.
        self._targets = [bt.Value(0.0) for _ in self._values]

    def run(self, phase: str, n: int) -> None:
        io, path, options = self._io, self.path, self._options
        if phase == "save":
            values = self._values
            for _ in range(n):
                io.save(path, values, what="values", **options)
        else:
            targets = self._targets
            for _ in range(n):
                io.load(path, targets, what="values")

    def numbers(self) -> dict:
        out = {name: t.data for name, t in zip(W3_NAMES, self._targets)}
        out["file bytes"] = os.path.getsize(self.path)
        return out

    def close(self) -> None:
        os.unlink(self.path)


def _models():
    from burtorch import nn
    from burtorch.optim import SGD
    from burtorch.oracle import grad_oracle

    return nn, grad_oracle, SGD


class BurtorchTrainRunner(TrainRunner):
    """W4 / W5 with burtorch.nn models: the paper's serialized batch (per-sample graph, backward
    with seed 1/b, rewind; burtorch.oracle.grad_oracle), then burtorch.optim.SGD. The `chunked`
    variant runs up to 64 samples as one graph (grad_oracle(..., chunk=...)): layers read their
    weights once per chunk; memory is one chunk's. The `fused` variant is the same graph stepped
    by SGD.fused_step, the linear weights updated inside the backward sweep."""

    timed_region = ("grad_oracle(model, batch): per sample build graph + backward(1/b) + rewind; "
                    "then SGD.step()")
    chunked_region = ("grad_oracle(model, batch, chunk=min(b, 64)): per chunk one graph over its "
                      "samples + backward(k/b) + rewind; then SGD.step()")

    fused_region = ("SGD.fused_step(model, batch, chunk=min(b, 64)): one graph over the batch, the "
                    "linear weights' SGD update applied inside the backward sweep")
    compiled_fused_region = ("SGD.fused_step(model, ArrayBatch(x, y), chunk=min(b, 64), compile=True): the batch "
                             "(its ids in the integer arrays the peers get) replayed natively as one chunk of a "
                             "recorded program (traced at the first step), the linear weights' SGD update applied "
                             "inside the sweep")

    def __init__(self, workload, config, hooks, chunk: int = 1, fused: bool = False, compiled: bool = False):
        self._nn, self._oracle, sgd = hooks
        self._chunk = chunk
        self._fused = fused
        self._compiled = compiled
        self._threads = config_threads(config)
        bt.set_num_threads(self._threads)
        if chunk > 1:
            self.timed_region = (self.compiled_fused_region if compiled else self.fused_region) if fused \
                else self.chunked_region
        super().__init__(workload, config)
        self._opt = sgd(self.model.parameters(), lr=MLP_LR if workload == "mlp" else GPT_LR)

    def to_params(self, p):
        """Builds the model and loads the shared weights (stored (in, out): linears transpose)."""
        nn, f32 = self._nn, bt.float32
        if self.workload == "mlp":
            e = p["W1"].shape[1]
            self.model = m = nn.MakemoreMLP.paper(hidden=e, vocab=self.vocab, dtype=f32)
            pairs = {"embed.weight": p["C"], "fc1.weight": p["W1"].T, "fc1.bias": p["b1"],
                     "fc2.weight": p["W2"].T, "fc2.bias": p["b2"]}
        else:
            import numpy as np
            final = "lnf.w" in p  # Karpathy's variant; the paper's model has no final norm
            self.model = m = (nn.MiniGPT.karpathy if final else nn.MiniGPT.paper)(vocab=self.vocab, dtype=f32)
            pairs = {"tok.weight": p["wte"], "pos.weight": p["wpe"], "head.weight": p["head.w"].T,
                     "head.bias": p["head.b"]}
            if final:
                pairs.update({"ln_f.weight": p["lnf.w"], "ln_f.bias": p["lnf.b"]})
            for i in range(len(m.blocks)):
                b = f"blocks.{i}."
                pairs.update({
                    b + "ln1.weight": p[f"{i}.ln1.w"], b + "ln1.bias": p[f"{i}.ln1.b"],
                    b + "attn.qkv.weight": np.concatenate(
                        [p[f"{i}.q"].T, p[f"{i}.k"].T, p[f"{i}.v"].T]),
                    b + "attn.proj.weight": p[f"{i}.proj.w"].T, b + "attn.proj.bias": p[f"{i}.proj.b"],
                    b + "ln2.weight": p[f"{i}.ln2.w"], b + "ln2.bias": p[f"{i}.ln2.b"],
                    b + "ff1.weight": p[f"{i}.ff1.w"].T, b + "ff1.bias": p[f"{i}.ff1.b"],
                    b + "ff2.weight": p[f"{i}.ff2.w"].T, b + "ff2.bias": p[f"{i}.ff2.b"],
                })
        state = m.state_dict()
        if set(state) != set(pairs):
            raise Unavailable(f"burtorch model parameters {sorted(set(state) ^ set(pairs))} do not "
                              "match the shared weights")
        for name, value in pairs.items():
            state[name].set_data(value.reshape(-1).tolist())  # row-major, as the model stores it
        return m

    def to_batch(self, x, y):
        if self._compiled:  # the replay reads the ids from the arrays themselves
            return ArrayBatch(x, y)
        if self.workload == "mlp":
            return [(ctx, int(t)) for ctx, t in zip(x.tolist(), y.tolist())]
        return [(ids, tgt) for ids, tgt in zip(x.tolist(), y.tolist())]

    def step(self, params, batch):
        if self._fused:
            return params, self._opt.fused_step(self.model, batch, chunk=min(self._chunk, len(batch)),
                                                threads=self._threads, compile=self._compiled)
        loss = self._oracle(self.model, batch, chunk=min(self._chunk, len(batch)), threads=self._threads)
        self._opt.step()
        return params, loss

    def loss_of(self, params, batch):
        return mean_loss(self.model, batch)


def make_runner(workload: str, variant: str, config: dict):
    if workload == "tiny":
        return GraphRunner(_w1, (-41.0, 2.0))
    if workload == "small":
        return GraphRunner(_w2, (-4.0, 2.0))
    if workload == "saveload":
        return SaveLoadRunner(config.get("dir"))
    if workload in ("mlp", "gpt"):
        return BurtorchTrainRunner(workload, config, _models(), chunk=1 if variant == "eager" else 64,
                                   fused=variant in ("fused", "compiled-fused"), compiled=variant == "compiled-fused")
    raise ValueError(f"burtorch does not implement workload {workload!r}")
