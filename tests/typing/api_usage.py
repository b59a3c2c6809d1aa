"""Typical uses of the public API, type-checked by mypy in CI against the shipped stubs
(`mypy tests/typing`). It is not collected by pytest; a separate test runs it as a script."""
from __future__ import annotations

import burtorch as bt
from burtorch.nn import MLP, MiniGPT


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
    loss.backward()
    cp = bt.checkpoint()
    with bt.no_grad():
        y = bt.softmax(h)
    bt.rewind(cp)
    return float(len(y.shape))


def models() -> int:
    bt.manual_seed(0)
    mlp = MLP(3, [4, 1])
    out = mlp([1.0, 2.0, 3.0])
    gpt = MiniGPT.paper()
    return gpt.num_parameters() + len(mlp.parameters()) + int(out.size)


if __name__ == "__main__":
    print(scalar_graph(), vectors(), models())
