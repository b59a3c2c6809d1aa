"""PyTorch: eager, TorchScript (W1/W2) and torch.compile, on one CPU thread."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..specs import (
    GPT_DMODEL,
    GPT_HEAD_SIZE,
    GPT_HEADS,
    GPT_LAYERS,
    GPT_LR,
    LN_EPS,
    MLP_LR,
)
from . import Unavailable
from .file_runner import FileSaveLoadRunner
from .training import TrainRunner

torch.set_num_threads(1)  # pinned to one core: more threads would only contend
try:
    torch.set_num_interop_threads(1)
except RuntimeError:
    pass

F64 = torch.float64


def versions() -> dict:
    return {"torch": torch.__version__}


# --- W1 / W2 ----------------------------------------------------------------------------------
# Written out here rather than taken from burtorch.workloads: torch.jit.script compiles the source
# of the function it is given, and cannot take the relu function as an argument.

def w1_forward(a, b):
    c = a + b
    d = a * b + b ** 3
    e = c - d
    f = e ** 2
    return f * 0.5


def w2_nodes(a, b):
    c = a + b
    d = a * b + b ** 3
    c = c + (c + 1)                      # c += c + 1: a new node, as in autograd
    c = c + (1 + c + (-a))
    d = d + (d * 2 + torch.relu(b + a))
    d = d + (3 * d + torch.relu(b - a))
    e = c - d
    f = e ** 2
    g = f / 2
    g = g + 10 / f
    return a, b, c, d, e, f, g


def w2_forward(a, b):
    return w2_nodes(a, b)[6]


class GraphRunner:
    def __init__(self, forward, leaves, variant):
        if variant == "script":
            forward = torch.jit.script(forward)
        elif variant == "compile":
            forward = torch.compile(forward, fullgraph=True)
        self.timed_region = (f"torch.tensor leaves (requires_grad) + {variant} forward + "
                             "g.backward() per iteration (the graph is freed by backward)")
        self._forward, self._leaves = forward, leaves
        self._last: Any = None  # set by run(), read after it

    def run(self, phase: str, n: int) -> None:
        forward, (a0, b0), tensor = self._forward, self._leaves, torch.tensor
        for _ in range(n):
            a = tensor(a0, dtype=F64, requires_grad=True)
            b = tensor(b0, dtype=F64, requires_grad=True)
            g = forward(a, b)
            g.backward()
        self._last = (g, a, b)

    def numbers(self) -> dict:
        g, a, b = self._last
        return {"g": g.item(), "dg/da": a.grad.item(), "dg/db": b.grad.item()}


# --- W3 ---------------------------------------------------------------------------------------

def _save_load_runner(directory: str | None) -> FileSaveLoadRunner:
    a = torch.tensor(-4.0, dtype=F64, requires_grad=True)
    b = torch.tensor(2.0, dtype=F64, requires_grad=True)
    tensor = torch.stack([t.detach() for t in w2_nodes(a, b)])  # torch's own W2 graph gives the 7 values
    return FileSaveLoadRunner(tensor, lambda path, t: torch.save(t, path), torch.load, ".pt",
                              "torch.save(tensor of 7 FP64, path) / torch.load(path)", directory)


# --- W4 / W5 ----------------------------------------------------------------------------------

def mlp_loss(p, x, y):
    emb = p["C"][x].reshape(x.shape[0], -1)
    h = torch.tanh(emb @ p["W1"] + p["b1"])
    return F.cross_entropy(h @ p["W2"] + p["b2"], y)


def gpt_loss(p, x, y):
    B, T = x.shape
    d, H, hs = GPT_DMODEL, GPT_HEADS, GPT_HEAD_SIZE
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    h = p["wte"][x] + p["wpe"][:T]
    for i in range(GPT_LAYERS):
        a = F.layer_norm(h, (d,), p[f"{i}.ln1.w"], p[f"{i}.ln1.b"], LN_EPS)
        q = (a @ p[f"{i}.q"]).view(B, T, H, hs).transpose(1, 2)
        k = (a @ p[f"{i}.k"]).view(B, T, H, hs).transpose(1, 2)
        v = (a @ p[f"{i}.v"]).view(B, T, H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * hs ** -0.5
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y_att = (att @ v).transpose(1, 2).reshape(B, T, d)
        h = h + y_att @ p[f"{i}.proj.w"] + p[f"{i}.proj.b"]
        a = F.layer_norm(h, (d,), p[f"{i}.ln2.w"], p[f"{i}.ln2.b"], LN_EPS)
        h = h + torch.relu(a @ p[f"{i}.ff1.w"] + p[f"{i}.ff1.b"]) @ p[f"{i}.ff2.w"] + p[f"{i}.ff2.b"]
    if "lnf.w" in p:  # Karpathy's final norm; the paper's model has none
        h = F.layer_norm(h, (d,), p["lnf.w"], p["lnf.b"], LN_EPS)
    logits = h @ p["head.w"] + p["head.b"]
    return F.cross_entropy(logits.reshape(B * T, -1), y.reshape(B * T))


class TorchTrainRunner(TrainRunner):
    def __init__(self, workload, variant, config):
        loss = mlp_loss if workload == "mlp" else gpt_loss
        self._loss = torch.compile(loss) if variant == "compile" else loss
        self._eager_loss = loss
        self._lr = MLP_LR if workload == "mlp" else GPT_LR
        self.timed_region = (f"{variant} loss + loss.backward() + torch.optim.SGD.step() + "
                             "zero_grad(set_to_none=True)")
        super().__init__(workload, config)
        self._opt = torch.optim.SGD(list(self.params.values()), lr=self._lr)

    def to_params(self, np_params):
        return {k: torch.from_numpy(v.copy()).requires_grad_() for k, v in np_params.items()}

    def to_batch(self, x, y):
        return torch.from_numpy(x), torch.from_numpy(y)

    def step(self, params, batch):
        loss = self._loss(params, *batch)
        loss.backward()
        self._opt.step()
        self._opt.zero_grad(set_to_none=True)
        return params, loss

    def scalar(self, loss):
        return loss.item()

    def loss_of(self, params, batch):
        with torch.no_grad():
            return self._eager_loss(params, *batch).item()


def make_runner(workload: str, variant: str, config: dict):
    if workload == "tiny":
        return GraphRunner(w1_forward, (-41.0, 2.0), variant)
    if workload == "small":
        return GraphRunner(w2_forward, (-4.0, 2.0), variant)
    if workload == "saveload":
        return _save_load_runner(config.get("dir"))
    if workload in ("mlp", "gpt"):
        if variant == "script":
            raise Unavailable("TorchScript variant implemented for W1/W2 only")
        return TorchTrainRunner(workload, variant, config)
    raise ValueError(f"torch does not implement workload {workload!r}")
