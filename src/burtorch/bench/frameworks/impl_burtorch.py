"""burtorch's side of the workloads: scalar Values in the thread's FP64 arena, rewound each iteration."""
from __future__ import annotations

import os
import tempfile

import burtorch as bt

from ..workloads import W3_NAMES
from . import Pending, Unavailable


def versions() -> dict:
    return {"burtorch": bt.__version__, "burtorch build": bt.build_info}


def _w1(a0: float, b0: float):
    a = bt.Value(a0)
    b = bt.Value(b0)
    c = a + b
    d = a * b + b ** 3
    e = c - d
    f = e ** 2
    g = f * 0.5
    g.backward()
    return g, a, b


def _w2_forward(a0: float, b0: float):
    a = bt.Value(a0)
    b = bt.Value(b0)
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
    return a, b, c, d, e, f, g


def _w2(a0: float, b0: float):
    a, b, *_, g = _w2_forward(a0, b0)
    g.backward()
    return g, a, b


class GraphRunner:
    """W1 / W2: every iteration builds from fresh leaves, sweeps back, and rewinds its nodes."""

    timed_region = "Value leaves + ops + g.backward() + bt.rewind(checkpoint) per iteration"

    def __init__(self, build, leaves):
        self._build = build
        self._leaves = leaves
        self._last = None

    def run(self, phase: str, n: int) -> None:
        build, checkpoint, rewind = self._build, bt.checkpoint, bt.rewind
        last = None
        for _ in range(n):
            cp = checkpoint()
            g, a, b = build(*self._leaves)
            last = (g.data, a.grad, b.grad)
            rewind(cp)
        self._last = last

    def numbers(self) -> dict:
        g, da, db = self._last
        return {"g": g, "dg/da": da, "dg/db": db}


class SaveLoadRunner:
    """W3 through bt.io.save / bt.io.load of a list of 7 Values (what='values')."""

    timed_region = "bt.io.save(path, values, what='values') / bt.io.load(path, values, what='values')"

    def __init__(self):
        try:
            from burtorch import io as btio  # built by another issue; absent until it lands
        except ImportError as exc:
            raise Unavailable("burtorch.io not available yet") from exc
        if not (hasattr(btio, "save") and hasattr(btio, "load")):
            raise Unavailable("burtorch.io not available yet")
        self._io = btio
        self._values = list(_w2_forward(-4.0, 2.0))
        self._expected = [v.data for v in self._values]
        fd, self.path = tempfile.mkstemp(prefix="burtorch-w3-", suffix=".bin")
        os.close(fd)
        self._io.save(self.path, self._values, what="values")
        # Targets of the loads: 7 fresh nodes holding zeros, so a load that reads nothing shows.
        self._targets = [bt.Value(0.0) for _ in self._values]

    def run(self, phase: str, n: int) -> None:
        io, path = self._io, self.path
        if phase == "save":
            values = self._values
            for _ in range(n):
                io.save(path, values, what="values")
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


def burtorch_w4_w5_pending(workload: str):
    """burtorch's W4 / W5 need burtorch.nn.MakemoreMLP / MiniGPT (issue 3); say so, never fake."""
    raise Pending("burtorch W4/W5 pending issue 3")


def make_runner(workload: str, variant: str, config: dict):
    if workload == "tiny":
        return GraphRunner(_w1, (-41.0, 2.0))
    if workload == "small":
        return GraphRunner(_w2, (-4.0, 2.0))
    if workload == "saveload":
        return SaveLoadRunner()
    if workload in ("mlp", "gpt"):
        return burtorch_w4_w5_pending(workload)
    raise ValueError(f"burtorch does not implement workload {workload!r}")
