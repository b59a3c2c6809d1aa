"""Typical uses of the public API, type-checked by mypy in CI against the installed package and its
stubs (`mypy tests/typing` from outside the checkout). tests/test_typing_usage.py runs it as a
script, so every use here also works.

`rejected()` is never called: each of its lines is an error a type checker must report. The
`# type: ignore[code]` comments say which; with warn_unused_ignores a line that stops being an
error (an annotation or a stub that degraded to Any) fails the check.
"""
from __future__ import annotations

import array
import os
import tempfile

import burtorch as bt
from burtorch import fl, io, nn, optim
from burtorch.data import CharTokenizer, TextDataset, WordDataset, split
from burtorch.nn import MLP, MiniGPT, MultiHeadAttention


def scalar_graph() -> tuple[float, float]:
    a = bt.Value(-4.0)
    b = bt.Value(2.0, label="b")
    c: bt.Value = a * b + b**3
    c = c + (b - a).relu() + bt.tanh(a) + bt.reduce_sum([a, b, 1.0])
    if c > 0:
        c = c * 0.5
    c.backward()
    return c.data, a.grad


def vectors() -> float:
    x = bt.leaves([[0.5, -1.0, 2.0]])
    W = bt.leaves(shape=(4, 3))
    h: bt.Vector = bt.linear(x, W).tanh()
    loss: bt.Value = bt.cross_entropy(h, [2])
    row = h[0]  # a row of a matrix is a Vector, an element of a vector a Value
    if isinstance(row, bt.Vector):
        loss = loss + bt.vsum(row) * 0.1
    head: bt.Vector = h[0:1]  # a slice is always a Vector
    loss = loss + head.sum()
    loss.backward()
    cp = bt.checkpoint()
    with bt.no_grad():
        y = bt.softmax(h)
    bt.rewind(cp)
    with bt.scope() as inner:
        n: int = inner.nodes
    return float(len(y.shape) + n * 0)


def attention() -> int:
    qkv = bt.leaves(shape=(3, 12))
    out: bt.Vector = bt.multi_head_attention(qkv, 2)
    fused, weights = bt.multi_head_attention(qkv, 2, return_weights=True)
    one_head, w = bt.attention(qkv.columns(0, 2), qkv.columns(6, 8), qkv.columns(10, 12), return_weights=True)
    mha = MultiHeadAttention(4, 2, dtype=bt.float64)
    y, per_head = mha.forward(bt.leaves(shape=(3, 4), dtype=bt.float64), return_weights=True)
    return out.size + fused.size + len(weights) + one_head.size + w.size + y.size + len(per_head)


def models() -> int:
    bt.manual_seed(0)
    mlp = MLP(3, [4, 1])
    out = mlp([1.0, 2.0, 3.0])
    gpt = MiniGPT.paper()
    return gpt.num_parameters() + len(mlp.parameters()) + int(out.size)


@bt.no_grad()
def evaluate(model: nn.MakemoreMLP, samples: list[tuple[tuple[int, ...], int]]) -> float:
    return bt.oracle.mean_loss(model, samples)


def training() -> float:
    words = ["emma", "olivia", "ava", "isabella", "sophia"]
    train_words, val_words = split(words, 0.2, seed=0)
    tok = CharTokenizer("".join(words), specials=".")
    data = WordDataset(train_words, block=3, tokenizer=tok, seed=1)
    batch: list[tuple[tuple[int, ...], int]] = data.batch(4)
    model = nn.MakemoreMLP(vocab=tok.vocab_size, block=3, emb=4, hidden=8)
    opt: optim.Optimizer = optim.AdamW(model, lr=1e-2)
    loss: float = bt.grad_oracle(model, batch)
    opt.step()
    state = opt.state_dict()
    opt.load_state_dict(state)
    text = TextDataset("hello world, hello types", block=4, tokenizer=None, seed=2)
    ids, targets = text[0]
    return loss + evaluate(model, [data[0]]) + len(val_words) + len(ids) + len(targets)


def files() -> int:
    model = MLP(2, [3])
    params = model.parameter_vector()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.bt")
        io.save_state_dict(model, path)
        flat: dict[str, array.array[float]] = io.load_state_dict(path)
        same: MLP = io.load_state_dict(path, model)
        io.save(os.path.join(tmp, "p.bt"), params, what="both")
        io.load(os.path.join(tmp, "p.bt"), params, what=None)
    blob: bytes = io.dumps([params, (params.arena, params.spans[0][0], params.spans[0][0] + 1)])
    io.loads(blob, [params, (params.arena, params.spans[0][0], params.spans[0][0] + 1)])
    header: io.Header = io.decode_header(blob, len(blob))
    return len(flat) + len(same.parameters()) + header.count


def federated() -> int:
    problem = fl.logistic.synthetic(n_clients=2, samples=20, dim=3)
    method: fl.Method = fl.EF21(compressor=fl.TopK(3, 1))
    with fl.Federation(problem, method, seed=0) as fed:
        records: list[dict[str, object]] = fed.run(3)
    msg: fl.Message = fl.make_compressor("randk", 3, k=1).compress([1.0, 2.0, 3.0], seed=5)
    return len(records) + msg.floats


def rejected() -> None:
    """Never called: each line is a type error (see the module docstring)."""
    bt.Value("one")  # type: ignore[arg-type]
    nn.Linear("3", 4)  # type: ignore[arg-type]
    bt.zero_grad([1.0, 2.0])  # type: ignore[list-item]
    optim.SGD(MLP(1, [1]), lr="fast")  # type: ignore[arg-type]
    vector: bt.Vector = bt.leaves([1.0, 2.0])[0]  # type: ignore[assignment]
    whole: bt.Vector = MultiHeadAttention(4, 2).forward(vector, return_weights=True)  # type: ignore[assignment]
    steps: int = bt.grad_oracle(MLP(1, [1]), [])  # type: ignore[assignment]
    io.save_state_dict(3, "x.bt")  # type: ignore[arg-type]
    WordDataset(["ab"]).batch(2, rng=7)  # type: ignore[arg-type]
    fl.Federation(problem=[], method=fl.GD())  # type: ignore[arg-type]
    print(whole, steps)


if __name__ == "__main__":
    print(scalar_graph(), vectors(), attention(), models(), training(), files(), federated())
