"""HIPS autograd: traces the function on boxed floats at every call, then sweeps back."""
from __future__ import annotations

import autograd
import autograd.numpy as anp

from . import Unavailable


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return {"autograd": version("autograd")}
    except PackageNotFoundError:
        return {"autograd": "unknown"}


def w1_forward(a, b):
    c = a + b
    d = a * b + b ** 3
    e = c - d
    f = e ** 2
    return f * 0.5


def relu(x):
    return anp.maximum(x, 0.0)


def w2_forward(a, b):
    c = a + b
    d = a * b + b ** 3
    c = c + (c + 1)
    c = c + (1 + c + (-a))
    d = d + (d * 2 + relu(b + a))
    d = d + (3 * d + relu(b - a))
    e = c - d
    f = e ** 2
    g = f / 2
    return g + 10 / f


class GraphRunner:
    timed_region = "autograd.value_and_grad(f, argnum=(0, 1))(a, b) on Python floats per iteration"

    def __init__(self, forward, leaves):
        self._fn = autograd.value_and_grad(forward, argnum=(0, 1))
        self._leaves, self._last = leaves, None

    def run(self, phase: str, n: int) -> None:
        fn, (a0, b0) = self._fn, self._leaves
        for _ in range(n):
            out = fn(a0, b0)
        self._last = out

    def numbers(self) -> dict:
        g, (da, db) = self._last
        return {"g": float(g), "dg/da": float(da), "dg/db": float(db)}


def make_runner(workload: str, variant: str, config: dict):
    if workload == "tiny":
        return GraphRunner(w1_forward, (-41.0, 2.0))
    if workload == "small":
        return GraphRunner(w2_forward, (-4.0, 2.0))
    raise Unavailable(f"autograd does not implement workload {workload!r}")
