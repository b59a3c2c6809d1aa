"""Generative tests of issue 41's surfaces: detect_anomaly against a plain run over every op and
range op, eager and compiled; and Python threads building, rewinding and replaying at once. Their
sizes follow BURTORCH_FUZZ (tests/fuzz_profile.py)."""
import math
import random

import numpy as np
import pytest

import burtorch as bt
from fuzz_profile import FUZZ_SEED, MODE_FUZZ_PROGRAMS
from op_table import BINARY, NARY, UNARY

HOSTILE = [0.0, -0.0, 1.0, -1.0, 1e-300, -1e-300, 1e300, -1e300, 700.0, 1000.0, -1000.0, math.inf, -math.inf,
           math.nan, 2.5, -2.5]


def _scalar_cases():
    for name, (f, _, _) in UNARY.items():
        yield name, 1, lambda xs, f=f: f(xs[0])
    for name, (f, _, _) in BINARY.items():
        yield name, 2, lambda xs, f=f: f(xs[0], xs[1])
    for name, (f, _, k) in NARY.items():
        n = {"inner_product": 4, "inner_product_with_bias": 5}.get(name, max(k, 3))
        yield name, n, lambda xs, f=f: f(list(xs))


def _range_cases():
    """Range ops, each over Vectors made of the inputs (the inputs are Values: the vectors are
    their copies by bt.vector of Values)."""
    maps = ["exp", "log", "sqrt", "inv", "inv_sqrt", "tanh", "sigmoid", "softplus", "relu", "neg_log", "sqr", "pow3",
            "sin", "cos", "abs"]
    for m in maps:
        yield f"map_{m}", 3, lambda xs, m=m: getattr(bt.vector(xs), m)().sum()
    yield "map_binary_mul", 4, lambda xs: (bt.vector(xs[:2]) * bt.vector(xs[2:])).sum()
    yield "map_binary_div", 4, lambda xs: (bt.vector(xs[:2]) / bt.vector(xs[2:])).sum()
    yield "sum", 3, lambda xs: bt.vector(xs).sum()
    yield "dot", 4, lambda xs: bt.dot(bt.vector(xs[:2]), bt.vector(xs[2:]))
    yield "linear", 6, lambda xs: bt.linear(bt.vector(xs[:2]), bt.vector(xs[2:]).reshape(2, 2)).sum()
    yield "softmax", 3, lambda xs: bt.softmax(bt.vector(xs)).dot(bt.vector([1.0, 2.0, 3.0]))
    yield "cross_entropy", 3, lambda xs: bt.cross_entropy(bt.vector(xs), 1)
    yield "layer_norm", 4, lambda xs: bt.layer_norm(bt.vector(xs), bt.vector([1.0, 2.0, 0.5, 1.0]),
                                                    bt.vector([0.0, 1.0, 0.0, -1.0])).dot(bt.vector([1, -2, 3, 0.5]))
    yield "vmean", 3, lambda xs: bt.vmean(bt.vector(xs))


CASES = list(_scalar_cases()) + list(_range_cases())


def _plain(fn, xs):
    """Whether every number of a run without the mode is finite: each node the ops made, then
    every grad after the backward sweep."""
    arena = bt.current_arena()
    cp = arena.checkpoint()
    try:
        leaves = [bt.Value(x) for x in xs]
        start = leaves[-1].index + 1
        out = fn(leaves)
        end = arena.num_nodes
        values = arena.numpy(start, end, "values", True)
        finite = bool(np.isfinite(values).all())
        if finite:
            out.backward()
            grads = arena.numpy(leaves[0].index, end, "grads", True)
            finite = bool(np.isfinite(grads).all())
        return finite
    finally:
        arena.rewind(cp)


def _anomalous(fn, xs) -> bool:
    arena = bt.current_arena()
    cp = arena.checkpoint()
    try:
        with bt.detect_anomaly():
            out = fn([bt.Value(x) for x in xs])
            out.backward()
        return False
    except bt.AnomalyError:
        return True
    finally:
        arena.rewind(cp)


def _draws(n_args, r):
    return [r.choice(HOSTILE) if r.random() < 0.4 else r.uniform(-3, 3) for _ in range(n_args)]


@pytest.mark.parametrize("name, n_args, fn", CASES, ids=[c[0] for c in CASES])
def test_detect_anomaly_equals_a_non_finite_number_eager(name, n_args, fn):
    r = random.Random(f"{FUZZ_SEED}-{name}")
    seen = set()
    for _ in range(max(4, MODE_FUZZ_PROGRAMS // 20)):
        xs = _draws(n_args, r)
        expected = not _plain(fn, xs)
        assert _anomalous(fn, xs) == expected, f"{name}{tuple(xs)}: a non-finite number {expected}"
        seen.add(expected)


@pytest.mark.parametrize("name, n_args, fn", CASES[::3], ids=[c[0] for c in CASES[::3]])
def test_detect_anomaly_covers_compiled_calls_and_map(name, n_args, fn):
    r = random.Random(f"{FUZZ_SEED}-compiled-{name}")
    argnums = tuple(range(n_args))
    f = bt.value_and_grad(lambda *xs: fn(list(xs)), argnums=argnums)
    rows = [_draws(n_args, r) for _ in range(max(3, MODE_FUZZ_PROGRAMS // 60))]
    for xs in rows:
        expected = not _plain(fn, xs)
        try:
            with bt.detect_anomaly():
                f(*xs)
            raised = False
        except bt.AnomalyError:
            raised = True
        assert raised == expected, f"compiled {name}{tuple(xs)}"
    expected = any(not _plain(fn, xs) for xs in rows)
    try:
        with bt.detect_anomaly():
            f.map(np.array(rows))
        raised = False
    except bt.AnomalyError:
        raised = True
    assert raised == expected, f"map {name}"
