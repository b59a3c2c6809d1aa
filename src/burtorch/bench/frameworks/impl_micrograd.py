"""micrograd (Karpathy): one Python object per scalar, recursive topological sort in backward."""
from __future__ import annotations

from micrograd.engine import Value

from . import Unavailable


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return {"micrograd": version("micrograd")}
    except PackageNotFoundError:
        return {"micrograd": "unknown"}


def w1(a0, b0):
    a = Value(a0)
    b = Value(b0)
    c = a + b
    d = a * b + b ** 3
    e = c - d
    f = e ** 2
    g = f * 0.5
    g.backward()
    return g, a, b


def w2(a0, b0):
    a = Value(a0)
    b = Value(b0)
    c = a + b
    d = a * b + b ** 3
    c += c + 1
    c += 1 + c + (-a)
    d += d * 2 + (b + a).relu()
    d += 3 * d + (b - a).relu()
    e = c - d
    f = e ** 2
    g = f / 2
    g += 10 / f
    g.backward()
    return g, a, b


class GraphRunner:
    timed_region = "Value leaves + ops + g.backward() per iteration (garbage collector frees nodes)"

    def __init__(self, build, leaves):
        self._build, self._leaves, self._last = build, leaves, None

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
