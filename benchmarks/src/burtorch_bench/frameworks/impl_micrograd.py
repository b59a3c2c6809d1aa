"""micrograd (Karpathy): one Python object per scalar, recursive topological sort in backward."""
from __future__ import annotations

from typing import Any

from micrograd.engine import Value

from burtorch.paper_graphs import w1_graph, w2_graph

from . import Unavailable


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return {"micrograd": version("micrograd")}
    except PackageNotFoundError:
        return {"micrograd": "unknown"}


def w1(a0, b0):
    a, b, g = w1_graph(Value, a0, b0)
    g.backward()
    return g, a, b


def w2(a0, b0):
    a, b, g = w2_graph(Value, a0, b0)
    g.backward()
    return g, a, b


class GraphRunner:
    timed_region = "Value leaves + ops + g.backward() per iteration (garbage collector frees nodes)"

    def __init__(self, build, leaves):
        self._build, self._leaves = build, leaves
        self._last: Any = None  # set by run(), read after it

    def run(self, phase: str, n: int) -> None:
        build, (a0, b0) = self._build, self._leaves
        for _ in range(n):
            g, a, b = build(a0, b0)
        self._last = (g.data, a.grad, b.grad)

    def numbers(self) -> dict:
        g, da, db = self._last
        return {"g": g, "dg/da": da, "dg/db": db}


def make_runner(workload: str, variant: str, config: dict):
    if workload == "tiny":
        return GraphRunner(w1, (-41.0, 2.0))
    if workload == "small":
        return GraphRunner(w2, (-4.0, 2.0))
    raise Unavailable(f"micrograd does not implement workload {workload!r}")
