"""HIPS autograd: traces the function on boxed floats at every call, then sweeps back."""
from __future__ import annotations

from typing import Any

import autograd
import autograd.numpy as anp

from burtorch.paper_graphs import w1_expr, w2_expr

from . import Unavailable


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return {"autograd": version("autograd")}
    except PackageNotFoundError:
        return {"autograd": "unknown"}


w1_forward = w1_expr


def relu(x):
    return anp.maximum(x, 0.0)


def w2_forward(a, b):
    return w2_expr(a, b, relu)[-1]


class GraphRunner:
    timed_region = "autograd.value_and_grad(f, argnum=(0, 1))(a, b) on Python floats per iteration"

    def __init__(self, forward, leaves):
        self._fn = autograd.value_and_grad(forward, argnum=(0, 1))
        self._leaves = leaves
        self._last: Any = None  # set by run(), read after it

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
