"""Recorded programs replay exactly what eager mode computes: bitwise where the record order is
the same (every test here), on W1, W2, every op of the tables, every range op and random graphs."""
import random

import numpy as np
import pytest
from hypothesis import given, settings

import burtorch as bt
from burtorch.paper_graphs import w1_expr, w2_expr
from op_table import BINARY, NARY, UNARY
from test_random_graphs import evaluate, inputs, programs


def eager(fn, xs):
    """(value, grads) of fn at xs, built and swept eagerly."""
    cp = bt.checkpoint()
    leaves = [bt.Value(x) for x in xs]
    root = fn(*leaves)
    root.backward()
    out = (root.data, [v.grad for v in leaves])
    bt.rewind(cp)
    return out


def assert_replays_eager(fn, X):
    f = bt.value_and_grad(fn, argnums=tuple(range(X.shape[1])))
    values, grads = f.map(X)
    for i, row in enumerate(X):
        v, g = eager(fn, row.tolist())
        assert values[i] == v or (np.isnan(values[i]) and np.isnan(v))
        np.testing.assert_array_equal(grads[i], g)
        cv, cg = f(*row.tolist())
        assert cv == values[i] or np.isnan(v)
        np.testing.assert_array_equal(cg, g)
    return f


def test_w1_w2_bitwise():
    rng = np.random.default_rng(0)
    X = np.vstack([[-41.0, 2.0], rng.normal(size=(50, 2)) * 5])
    f1 = assert_replays_eager(w1_expr, X)
    assert f1(-41.0, 2.0) == (612.5, (-35.0, 1050.0))
    assert_replays_eager(lambda a, b: w2_expr(a, b)[-1], np.vstack([[-4.0, 2.0], rng.normal(size=(50, 2))]))
    assert f1.traces == 1  # one trace served every sample


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops(name):
    f, _, sample = UNARY[name]
    rng = random.Random(name)
    assert_replays_eager(lambda x: f(x), np.array([[sample(rng)] for _ in range(20)]))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops(name):
    f, _, (sa, sb) = BINARY[name]
    rng = random.Random(name)
    assert_replays_eager(lambda a, b: f(a, b), np.array([[sa(rng), sb(rng)] for _ in range(20)]))


@pytest.mark.parametrize("name", sorted(NARY))
def test_nary_ops(name):
    f = NARY[name][0]
    rng = np.random.default_rng(3)
    X = rng.uniform(0.3, 2.0, size=(10, 5 if name == "inner_product_with_bias" else 4))
    assert_replays_eager(lambda *xs: f(list(xs)), X)


@settings(max_examples=60, deadline=None)
@given(programs, inputs)
def test_random_graphs_bitwise(program, xs):
    rng = np.random.default_rng(len(program))
    X = np.vstack([xs, rng.uniform(-2, 2, size=(4, 3))])
    assert_replays_eager(lambda a, b, c: evaluate(program, [a, b, c], bt), X)


# ---------------------------------------------------------------- range ops, with parameters
def _range_cases():
    W = bt.leaves(np.random.default_rng(1).normal(size=(4, 3)).tolist())
    b = bt.leaves([0.1, -0.2, 0.3, 0.05])
    g = bt.leaves([1.0, 0.5, 2.0, 1.5])
    be = bt.leaves([0.0, 0.1, -0.1, 0.2])
    qkv = bt.leaves(np.random.default_rng(2).normal(size=(3, 12)).tolist())
    E = bt.leaves(np.random.default_rng(3).normal(size=(5, 4)).tolist())

    def vec(x, y, z):
        return bt.vector([x, y, z, x * y, y * z, z * x])

    cases = {
        "linear": (lambda x, y, z: bt.vsum(bt.linear(vec(x, y, z)[0:3], W, b).tanh()), [W, b]),
        "linear_rows": (lambda x, y, z: bt.vmean(bt.linear(vec(x, y, z).reshape(2, 3), W, b).relu()), [W, b]),
        "maps": (lambda x, y, z: bt.vsum((vec(x, y, z).exp() * vec(z, y, x) - vec(x, x, y) / 3.0).sigmoid()), []),
        "dot": (lambda x, y, z: bt.dot(vec(x, y, z), vec(z, y, x)), []),
        "softmax": (lambda x, y, z: bt.dot(bt.softmax(vec(x, y, z).reshape(2, 3)), vec(y, z, x)), []),
        "cross_entropy": (lambda x, y, z: bt.cross_entropy(vec(x, y, z).reshape(2, 3), [2, 0]), []),
        "layer_norm": (lambda x, y, z: bt.dot(bt.layer_norm(bt.linear(vec(x, y, z)[0:3], W), g, be),
                                              bt.vector([x, y, z, x])), [g, be, W]),
        "attention": (lambda x, y, z: bt.vsum(bt.attention(*[bt.linear(bt.vector([x, y, z]).reshape(1, 3), W)
                                                             for _ in range(3)]).sqr()), [W]),
        "mha": (lambda x, y, z: bt.vsum(bt.multi_head_attention(
            qkv + bt.cat([bt.vector([x, y, z])] * 12).reshape(3, 12), 2).tanh()), [qkv]),
        "embedding": (lambda x, y, z:
                      bt.vsum((bt.embedding(E, [1, 3, 1]).flatten()[2:5] * bt.vector([x, y, z])).tanh()),
                      [E]),
    }
    return cases


# ---------------------------------------------------------------- first writers
# A replay zeroes the grads its sweep adds into before each sample, except where a range record
# (linear, unary map, softmax, cross-entropy) is the first to reach its input's grads: that one
# writes them. These graphs put such a record first, skipped or not, and then something adding
# after it, or give it an input it reads twice (which must keep adding).
_W = bt.leaves(np.random.default_rng(4).normal(size=(3, 4)).tolist())


def _first_writer_cases():
    # In each, the records that add into x's grads are built first, so that the reverse sweep
    # reaches the candidate first writer (built last) before them.
    def vec(a, b, c):
        return bt.vector([a, b, c, a * b])

    def tanh_then_product(a, b, c):
        x = vec(a, b, c)
        u = bt.vsum(x * vec(c, b, a))
        return bt.vsum(x.tanh()) + u  # tanh writes x's grads, then the product adds

    def skipped_tanh(a, b, c):
        x = vec(a, b, c)
        u = bt.vsum(x * x)
        return bt.vsum(x.tanh()) * 0.0 + u  # the tanh's output grads are zero: the sweep skips it

    def skipped_linear_then_softmax(a, b, c):
        x = vec(a, b, c)
        s = bt.dot(bt.softmax(x.reshape(2, 2)), x)
        return bt.vsum(bt.linear(x, _W)) * 0.0 + s

    def softmax_first(a, b, c):
        x = vec(a, b, c)
        u = bt.vsum(x.exp())
        y = bt.vector([a * c, b * c, a * a, c * c])  # new slots, built before the softmax
        return bt.dot(bt.softmax(x.reshape(2, 2)), y) + u

    def linear_over_x_twice(a, b, c):
        x = vec(a, b, c)
        u = bt.vsum(x.sigmoid())
        # the linear's input lists x's slots twice: it must add both halves, not write them
        return bt.cross_entropy(bt.linear(bt.cat([x, x]).reshape(2, 4), _W), [2, 0]) + u

    return {f.__name__: f for f in (tanh_then_product, skipped_tanh, skipped_linear_then_softmax, softmax_first,
                                    linear_over_x_twice)}


@pytest.mark.parametrize("case", sorted(_first_writer_cases()))
def test_first_writers_replay_eager_bitwise(case):
    rng = np.random.default_rng(9)
    assert_replays_eager(_first_writer_cases()[case], rng.uniform(-2, 2, size=(6, 3)))


@pytest.mark.parametrize("rows", [1, 4])
def test_first_writer_linear_keeps_the_sign_of_zero(rows):
    # The linear writes its input's grads in place. Each column's chain of products underflows:
    # all +0 until the last row of W, whose negative product rounds to -0, where eager's sum into
    # zeroed grads gives 0 + -0 = +0. The inputs are the linear's x themselves (a view of the
    # leaves), so their grads show it. One row takes the chained axpys, four rows the tiles.
    tiny = 5e-324
    W = bt.leaves([[tiny, tiny, tiny]] * 7 + [[-tiny, tiny, -tiny]])

    def f(*xs):
        return bt.vsum(bt.linear(bt.vector(list(xs)).reshape(rows, 3), W)) * 0.25

    X = np.arange(1.0, 1.0 + 3 * rows).reshape(1, -1)
    g = bt.value_and_grad(f, argnums=tuple(range(3 * rows)))
    _, grads = g.map(X)
    leaves = [bt.Value(x) for x in X[0]]
    f(*leaves).backward()
    want = np.array([v.grad for v in leaves])
    assert np.all(want == 0) and not np.signbit(want).any()
    assert not np.signbit(grads[0]).any() and np.all(grads[0] == 0)
    assert not np.signbit(g(*X[0].tolist())[1]).any()


@pytest.mark.parametrize("case", sorted(_range_cases()))
def test_range_ops_bitwise_with_parameters(case):
    build, params = _range_cases()[case]
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, size=(5, 3))
    for row in X:
        # eager: grads of the inputs and of every parameter
        for p in params:
            p.zero_grad()
        cp = bt.checkpoint()
        leaves = [bt.Value(x) for x in row]
        root = build(*leaves)
        root.backward()
        want_v = root.data
        want = [v.grad for v in leaves] + [x for p in params for x in p.tolist("grads")]
        bt.rewind(cp)
        prog_wrt = bt.trace(build, row.tolist())
        assert len(prog_wrt) >= 1
        values = np.empty(1)
        out = np.empty((1, prog_wrt.num_wrt))
        assert prog_wrt._replay(row.reshape(1, 3), np.zeros((1, 0), np.int64), "rows", 1.0, values, out) == []
        assert values[0] == want_v
        np.testing.assert_array_equal(out[0], want[:3])
        # the parameters' grads: a program whose wrt is inputs then parameters
        full = _trace_wrt(build, row, params)
        out = np.empty((1, full.num_wrt))
        full._replay(row.reshape(1, 3), np.zeros((1, 0), np.int64), "rows", 1.0, values, out)
        np.testing.assert_array_equal(out[0], want)


def _trace_wrt(build, row, params):
    """A program reporting the inputs' grads, then the parameters'."""
    arena = bt.current_arena()
    cp = arena.checkpoint()
    bt._core._trace_begin(arena, 0)
    try:
        leaves = [bt.Value(x) for x in row]
        root = build(*leaves)
        return bt._core._trace_end(root, leaves, leaves + list(params))
    finally:
        bt._core._trace_abort()
        arena.rewind(cp)


def test_inspect_program():
    f = bt.value_and_grad(w1_expr, argnums=(0, 1))
    f(1.0, 2.0)
    (prog,) = f.programs()
    assert len(prog) == 7 and sum(prog.ops().values()) == 7
    assert prog.ops()["pow_const"] == 2 and prog.num_inputs == 2 and prog.num_wrt == 2
    dot = bt.viz.to_dot(prog)
    assert dot.startswith("digraph") and dot.count("pow_const") == 2


def test_float32_program_matches_float32_eager():
    f = bt.value_and_grad(w1_expr, argnums=(0, 1), dtype=bt.float32)
    X = np.array([[-41.0, 2.0], [0.3, -1.7]])
    values, grads = f.map(X)
    assert f.programs()[0].dtype == bt.float32 and grads.dtype == np.float32
    for i, (a0, b0) in enumerate(X):
        a, b = bt.Value(a0, dtype=bt.float32), bt.Value(b0, dtype=bt.float32)
        g = w1_expr(a, b)
        g.backward()
        assert (values[i], grads[i, 0], grads[i, 1]) == (g.data, a.grad, b.grad)


def test_map_mean_and_grad_only():
    f = bt.grad(w1_expr, argnums=(0, 1))
    X = np.random.default_rng(4).normal(size=(30, 2))
    rows = f.map(X)
    mean = f.map(X, reduce="mean")
    np.testing.assert_allclose(mean, rows.mean(axis=0), rtol=1e-12)
    assert bt.grad(w1_expr)(-41.0, 2.0) == -35.0


def test_wrt_pruning_keeps_only_records_leading_to_wrt():
    def fn(a, b):
        head = (a * 2.0).tanh()  # only this path depends on a
        body = (b.exp() + b.sin()) * b.cos()
        return head * 3.0 + body
    full = bt.trace(fn, [0.3, 0.7])
    only_a = bt.trace(fn, [0.3, 0.7], wrt_inputs=[0])
    assert only_a.swept < full.swept and len(only_a) == len(full)
    X = np.array([[0.3, 0.7], [-1.2, 2.0]])
    for prog_cols, prog in ((slice(0, 1), only_a), (slice(0, 2), full)):
        out = np.empty((2, prog.num_wrt))
        prog._replay(X, np.zeros((2, 0), np.int64), "rows", 1.0, np.empty(2), out)
        for i, row in enumerate(X):
            np.testing.assert_array_equal(out[i], eager(fn, row.tolist())[1][prog_cols])


def test_dead_records_are_dropped_at_trace_time():
    def fn(a):
        unused = a.exp() * 5.0  # noqa: F841  (never reaches the root)
        return a * a
    prog = bt.trace(fn, [2.0])
    assert prog.traced_records == 3 and len(prog) == 1


def test_traced_ids_are_program_inputs():
    """Ids passed as id arguments become a gather record and a cross-entropy target that each
    replay rewrites; results equal the eager view-based lookup bitwise."""
    E = bt.leaves(np.random.default_rng(5).normal(size=(6, 3)).tolist())

    def fn(x, ids, target):
        rows = bt.embedding(E, ids)
        return bt.cross_entropy((rows.flatten()[0:3] * bt.vector([x, x, x])).reshape(1, 3), target)

    f = bt.value_and_grad(fn, argnums=0, ids=(1, 2))
    rng = np.random.default_rng(6)
    X = rng.normal(size=8)
    ids = rng.integers(0, 6, size=(8, 2))
    targets = rng.integers(0, 3, size=8)
    values, grads = f.map(X, ids=[ids, targets])
    assert f.traces == 1
    (prog,) = f.programs()
    assert prog.ops().get("gather") == 1 and prog.num_ids == 3
    for i in range(8):
        cp = bt.checkpoint()
        x = bt.Value(X[i])
        root = fn(x, ids[i].tolist(), int(targets[i]))
        root.backward()
        assert values[i] == root.data and grads[i, 0] == x.grad
        assert f(X[i], ids[i].tolist(), int(targets[i])) == (root.data, x.grad)
        bt.rewind(cp)
    with pytest.raises(IndexError, match="out of range"):
        f.map(X, ids=[ids, targets + 3])
