"""Property tests: random expression graphs match finite differences and PyTorch."""
import functools
import importlib.util
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import burtorch as bt

# (name, arity, safe on any input?) - the expressions guard domains so values stay finite
OPS = ["add", "sub", "mul", "tanh", "sigmoid", "exp_tanh", "sqr", "mul_const", "add_const",
       "softplus", "sin", "div_safe", "log_safe", "sqrt_safe", "reduce_sum", "inner"]


def apply(op, args, lib):
    a, b, c = args
    if op == "add": return a + b
    if op == "sub": return a - b
    if op == "mul": return a * b
    if op == "tanh": return lib.tanh(a)
    if op == "sigmoid": return lib.sigmoid(a)
    if op == "exp_tanh": return lib.exp(lib.tanh(a))
    if op == "sqr": return a * a
    if op == "mul_const": return a * 0.75
    if op == "add_const": return 1.25 + a
    if op == "softplus": return lib.softplus(a)
    if op == "sin": return lib.sin(a)
    if op == "div_safe": return a / (1.5 + lib.sigmoid(b))
    if op == "log_safe": return lib.log(1.0 + a * a)
    if op == "sqrt_safe": return lib.sqrt(2.0 + lib.tanh(a))
    if op == "reduce_sum": return lib.reduce_sum([a, b, c])
    if op == "inner": return lib.inner_product([a, b], [b, c])
    raise AssertionError(op)


class Floats:
    """The same ops on plain floats, for finite differences."""
    tanh = staticmethod(math.tanh)
    exp = staticmethod(math.exp)
    log = staticmethod(math.log)
    sqrt = staticmethod(math.sqrt)
    sin = staticmethod(math.sin)
    sigmoid = staticmethod(lambda x: 1 / (1 + math.exp(-x)))
    softplus = staticmethod(lambda x: math.log1p(math.exp(-abs(x))) + max(x, 0.0))
    reduce_sum = staticmethod(sum)
    inner_product = staticmethod(lambda x, w: sum(p * q for p, q in zip(x, w)))


programs = st.lists(
    st.tuples(st.sampled_from(OPS), st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 1000)),
    min_size=1, max_size=25)
inputs = st.lists(st.floats(-2.0, 2.0), min_size=3, max_size=3)


def evaluate(program, xs, lib):
    nodes = list(xs)
    for op, i, j, k in program:
        n = len(nodes)
        y = apply(op, (nodes[i % n], nodes[j % n], nodes[k % n]), lib)
        nodes.append(y)
    return nodes[-1] + 0.0 * nodes[0]  # the root depends on input 0 at least formally


@settings(max_examples=150, deadline=None)
@given(programs, inputs)
def test_random_graph_matches_finite_differences(program, xs):
    with bt.scope():
        leaves = [bt.Value(x) for x in xs]
        root = evaluate(program, leaves, bt)
        root.backward()
        f = lambda v: evaluate(program, v, Floats)  # noqa: E731
        assert root.data == pytest.approx(f(xs), rel=1e-12, abs=1e-12)
        h = 1e-6
        for i, leaf in enumerate(leaves):
            up, dn = list(xs), list(xs)
            up[i] += h
            dn[i] -= h
            fd = (f(up) - f(dn)) / (2 * h)
            assert leaf.grad == pytest.approx(fd, rel=1e-4, abs=1e-5 * (1 + abs(fd)))


# PyTorch is imported by the test that uses it, not at collection: two seconds in every process
# that collects this file (each pytest-xdist worker), whichever of them runs the test.
@functools.cache
def torch_ops():
    """(torch, `evaluate`'s ops over PyTorch tensors)."""
    import torch

    class Torch:
        tanh = staticmethod(torch.tanh)
        exp = staticmethod(torch.exp)
        log = staticmethod(torch.log)
        sqrt = staticmethod(torch.sqrt)
        sin = staticmethod(torch.sin)
        sigmoid = staticmethod(torch.sigmoid)
        softplus = staticmethod(torch.nn.functional.softplus)
        reduce_sum = staticmethod(lambda xs: torch.stack(xs).sum())
        inner_product = staticmethod(lambda x, w: (torch.stack(x) * torch.stack(w)).sum())

    return torch, Torch


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="PyTorch not installed (pip install torch==2.13.0)")
@settings(max_examples=100, deadline=None)
@given(programs, inputs)
def test_random_graph_matches_pytorch(program, xs):
    with bt.scope():
        leaves = [bt.Value(x) for x in xs]
        root = evaluate(program, leaves, bt)
        root.backward()
        torch, Torch = torch_ops()
        tl = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
        troot = evaluate(program, tl, Torch)
        troot.backward()
        assert root.data == pytest.approx(troot.item(), rel=1e-12, abs=1e-12)
        for leaf, t in zip(leaves, tl):
            expected = 0.0 if t.grad is None else t.grad.item()
            assert leaf.grad == pytest.approx(expected, rel=1e-10, abs=1e-12)
