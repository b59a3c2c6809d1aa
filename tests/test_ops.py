"""Every op: forward against plain-Python math, gradient against central finite differences (FP64),
float32 against float64, and (when installed) value and gradient against PyTorch."""
import importlib.util
import math

import pytest

import burtorch as bt
from op_table import BINARY, NARY, UNARY

POINTS = 25


def fd_grad(f, xs, h=1e-6):
    """Central differences of the plain-float function f at xs."""
    g = []
    for i in range(len(xs)):
        up = list(xs)
        dn = list(xs)
        up[i] += h
        dn[i] -= h
        g.append((f(up) - f(dn)) / (2 * h))
    return g


def run_graph(build, xs, dtype=bt.float64):
    """Builds the op on fresh leaves, runs backward, returns (value, grads) and discards the nodes."""
    with bt.scope():
        leaves = [bt.Value(x, dtype=dtype) for x in xs]
        y = build(leaves)
        y.backward()
        return y.data, [v.grad for v in leaves]


def check(build, ref, xs, rel=1e-6):
    value, grads = run_graph(build, xs)
    assert value == pytest.approx(ref(xs), rel=1e-12, abs=1e-12)
    expected = fd_grad(ref, xs)
    for g, e in zip(grads, expected):
        assert g == pytest.approx(e, rel=rel, abs=1e-6)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, rng):
    op, ref, sample = UNARY[name]
    for _ in range(POINTS):
        check(lambda vs: op(vs[0]), lambda xs: ref(xs[0]), [sample(rng)])


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, rng):
    op, ref, (sa, sb) = BINARY[name]
    for _ in range(POINTS):
        check(lambda vs: op(vs[0], vs[1]), lambda xs: ref(xs[0], xs[1]), [sa(rng), sb(rng)])


def test_binary_same_argument_twice():
    # x * x and x - x use one slot for both arguments: both contributions must land.
    for build, value, grad in [(lambda x: x * x, 9.0, 6.0), (lambda x: x - x, 0.0, 0.0),
                               (lambda x: x / x, 1.0, 0.0), (lambda x: bt.add_squares(x, x), 18.0, 12.0)]:
        v, (g,) = run_graph(lambda vs: build(vs[0]), [3.0])
        assert v == pytest.approx(value) and g == pytest.approx(grad, abs=1e-12)


@pytest.mark.parametrize("name", sorted(NARY))
@pytest.mark.parametrize("n", [1, 2, 3, 7, 16])
def test_nary(name, n, rng):
    op, ref, min_n = NARY[name]
    if name == "inner_product":
        n = 2 * n
    elif name == "inner_product_with_bias":
        n = 2 * n + 1
    if n < min_n:
        with pytest.raises(ValueError):
            run_graph(op, [1.0] * n)
        return
    for _ in range(5):
        xs = [rng.uniform(-2, 2) for _ in range(n)]
        check(op, ref, xs, rel=1e-5)


def test_reduce_mul_with_zeros():
    # prefix/suffix products: exact gradients even where an argument is 0
    _, grads = run_graph(bt.reduce_mul, [2.0, 0.0, 3.0, 0.0])
    assert grads == [0.0, 0.0, 0.0, 0.0]
    _, grads = run_graph(bt.reduce_mul, [2.0, 0.0, 3.0])
    assert grads == [0.0, 6.0, 0.0]


def test_nary_emits_one_record_and_accepts_numbers():
    a = bt.current_arena()
    with bt.scope():
        xs = [bt.Value(float(i)) for i in range(10)]
        r0 = a.num_records
        s = bt.reduce_sum(xs + [2.5])
        assert a.num_records == r0 + 1
        assert s.data == 47.5
        assert s.op == "reduce_sum" and len(s.children) == 11


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY))
def test_float32_agrees_with_float64(name, rng):
    if name in UNARY:
        op, _, sample = UNARY[name]
        build, xs = (lambda vs: op(vs[0])), [sample(rng)]
    else:
        op, _, samplers = BINARY[name]
        build, xs = (lambda vs: op(vs[0], vs[1])), [s(rng) for s in samplers]
    v64, g64 = run_graph(build, xs, bt.float64)
    v32, g32 = run_graph(build, xs, bt.float32)
    assert v32 == pytest.approx(v64, rel=1e-5, abs=1e-6)
    for a, b in zip(g32, g64):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-5)


# ---- documented behaviour at the edges (README: "Edge values") ----

def test_edge_policy():
    inf = math.inf
    cases = [
        # build, x, value, grad
        (bt.relu, 0.0, 0.0, 0.0),             # relu'(0) = 0, as in PyTorch
        (bt.abs, 0.0, 0.0, 0.0),              # abs'(0) = 0
        (bt.log, 0.0, -inf, inf),             # log(0) = -inf, d/dx = +inf
        (bt.sqrt, 0.0, 0.0, inf),             # sqrt'(0) = +inf
        (bt.inv, 0.0, inf, -inf),             # 1/0 = inf (IEEE), d/dx = -inf
        (bt.sigmoid, -1000.0, 0.0, 0.0),      # no overflow error: saturates
        (bt.softplus, 1000.0, 1000.0, 1.0),   # no overflow
    ]
    for build, x, value, grad in cases:
        v, (g,) = run_graph(lambda vs: build(vs[0]), [x])
        assert v == value and g == grad, (build, x, v, g)
    v, (g,) = run_graph(lambda vs: bt.log(vs[0]), [-1.0])
    assert math.isnan(v)                      # log of a negative number is nan, no exception
    v, (ga, gb) = run_graph(lambda vs: vs[0] ** vs[1], [0.0, 2.0])
    assert v == 0.0 and ga == 0.0 and gb == 0.0  # d(a**b)/db at a = 0 taken as 0, as PyTorch


def test_division_by_small_numbers():
    for b in [1e-8, -1e-8, 1e-150]:
        v, (ga, gb) = run_graph(lambda vs: vs[0] / vs[1], [1.0, b])
        assert v == pytest.approx(1.0 / b) and ga == pytest.approx(1.0 / b)
        assert gb == pytest.approx(-1.0 / (b * b))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="PyTorch not installed (pip install torch==2.13.0)")
def test_against_pytorch(rng):
    import torch  # here, not at collection: two seconds in every process that collects this file

    tops = {
        "relu": torch.relu, "tanh": torch.tanh, "exp": torch.exp, "log": torch.log,
        "sigmoid": torch.sigmoid, "sqrt": torch.sqrt, "sin": torch.sin, "cos": torch.cos,
        "abs": torch.abs, "softplus": torch.nn.functional.softplus,
        "inv": lambda t: 1 / t, "inv_sqrt": torch.rsqrt, "neg_log": lambda t: -torch.log(t),
        "sqr": lambda t: t * t, "pow3": lambda t: t ** 3, "rpow_const": lambda t: 2.0 ** t,
        "pow_const_frac": lambda t: t ** 1.7,
    }
    for name, tf in tops.items():
        op, _, sample = UNARY[name]
        for _ in range(5):
            x = sample(rng)
            v, (g,) = run_graph(lambda vs: op(vs[0]), [x])
            t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
            y = tf(t)
            y.backward()
            assert v == pytest.approx(y.item(), rel=1e-12, abs=1e-14), name
            assert g == pytest.approx(t.grad.item(), rel=1e-10, abs=1e-12), name
