"""Range ops: values against plain-Python references, gradients against central finite differences
(FP64) through every kind of operand (contiguous, sliced, concatenated, column views), and against
PyTorch when it is installed."""
import math

import pytest

import burtorch as bt
from finite_diff import central_difference


def rand_leaves(rng, n, shape=None, scale=1.0):
    return bt.leaves([rng.uniform(-scale, scale) for _ in range(n)], shape=shape)


def fd_check(build, params, rng, h=1e-6, tol=1e-5, samples=12):
    """build() -> scalar Value from the current leaf values; compares backward grads of the given
    leaf Vectors with central differences at `samples` random elements."""
    with bt.scope():
        for p in params:
            p.zero_grad()
        y = build()
        y.backward()
        grads = [p.grad for p in params]
    for _ in range(samples):
        k = rng.randrange(len(params))
        p = params[k]
        i = rng.randrange(p.size)
        fd = central_difference(p.flatten()[i], build, h)
        assert grads[k][i] == pytest.approx(fd, rel=tol, abs=tol), (k, i)


@pytest.fixture
def arena():
    a = bt.Arena()
    with a:
        yield a


def test_views_copy_nothing(arena):
    x = bt.leaves([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=(2, 3))
    n = arena.num_nodes
    row = x[1]
    cols = x.columns(1, 3)
    both = bt.cat([row, cols.flatten()])
    emb = bt.embedding(x, [1, 0, 1])
    assert arena.num_nodes == n and arena.num_records == 0
    assert row.data == [4.0, 5.0, 6.0]
    assert cols.data == [2.0, 3.0, 5.0, 6.0] and cols.shape == (2, 2)
    assert both.data == [4.0, 5.0, 6.0, 2.0, 3.0, 5.0, 6.0]
    assert emb.shape == (3, 3) and emb.data == [4, 5, 6, 1, 2, 3, 4, 5, 6]
    assert emb.spans == [(3, 3), (0, 6)]  # row 0 then row 1 are adjacent slots: one span
    # over a table that is itself a view of several spans: each id's row is its spans, in order
    emb2 = bt.embedding(cols, [1, 1, 0])
    assert emb2.shape == (3, 2) and emb2.data == [5, 6, 5, 6, 2, 3]
    assert emb2.spans == [(4, 2), (4, 2), (1, 2)]
    wide = bt.hcat([cols, x])
    assert wide.shape == (2, 5) and wide.data == [2, 3, 1, 2, 3, 5, 6, 4, 5, 6]
    assert wide.spans == [(1, 2), (0, 3), (4, 2), (3, 3)]
    assert arena.num_nodes == n and arena.num_records == 0


def test_elementwise_maps(arena, rng):
    x = rand_leaves(rng, 7)
    w = rand_leaves(rng, 7)
    for name in ["tanh", "relu", "exp", "sigmoid", "sin", "neg", "sqr"]:
        y = getattr(x, name)()
        assert arena.num_records > 0
        ref = [getattr(bt, name)(v).data for v in x.values()]
        assert y.data == pytest.approx(ref)
        fd_check(lambda: getattr(x, name)().dot(w), [x, w], rng)
    fd_check(lambda: ((x * w) + x / (w * w + 1.0) - 2.0 * x).sum(), [x, w], rng)
    fd_check(lambda: (x ** 2.0).mean() + (1.0 - x).sum() + (3.0 / (x * x + 1.0)).sum(), [x], rng)


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_a_unary_maps_grads_have_the_same_bits_from_one_span_or_many(rng, dtype):
    """A map over one span adds its grads into the input's in place, task by task; over many it
    goes through scratch and a scatter-add. Both must add the same values in the same order, on
    top of what another op already added (here x * x, swept before the map)."""
    n = 3000
    vals = [rng.uniform(-2, 2) for _ in range(n)]
    with bt.Arena(dtype):
        one = bt.leaves(vals)
        table = bt.leaves([v for x in vals for v in (x, 0.5)], shape=(n, 2))
        many = table.columns(0, 1).flatten()
        assert len(one.spans) == 1 and len(many.spans) == n
        w = bt.leaves([rng.uniform(-1, 1) for _ in range(n)])
        grads = []
        for x in (one, many):
            loss = x.tanh().dot(w) + (x * x).sum()
            loss.backward()
            grads.append(x.grad)
        assert grads[0] == grads[1]
        assert table.grad[0::2] == grads[0] and set(table.grad[1::2]) == {0.0}


def test_linear_vector_and_matrix_inputs(arena, rng):
    W = rand_leaves(rng, 12, shape=(3, 4))
    b = rand_leaves(rng, 3)
    x = rand_leaves(rng, 4)
    y = bt.linear(x, W, b)
    ref = [sum(W[o].data[i] * x.data[i] for i in range(4)) + b.data[o] for o in range(3)]
    assert y.data == pytest.approx(ref)
    c = rand_leaves(rng, 3)
    fd_check(lambda: bt.linear(x, W, b).tanh().dot(c), [x, W, b, c], rng)
    X = rand_leaves(rng, 20, shape=(5, 4))
    Y = bt.linear(X, W)
    assert Y.shape == (5, 3)
    assert Y[2].data == pytest.approx(bt.linear(X[2], W).data)
    fd_check(lambda: bt.linear(X, W, b).sin().sum(), [X, W, b], rng)
    # many rows of a wide layer (in > 64): the output-unit-major kernels
    Xw = rand_leaves(rng, 6 * 80, shape=(6, 80))
    Ww = rand_leaves(rng, 7 * 80, shape=(7, 80))
    bw = rand_leaves(rng, 7)
    Yw = bt.linear(Xw, Ww, bw)
    for r in (0, 5):
        assert Yw[r].data == pytest.approx(bt.linear(Xw[r], Ww, bw).data, rel=1e-12)
    fd_check(lambda: bt.linear(Xw, Ww, bw).tanh().sum(), [Xw, Ww, bw], rng)
    # a concatenated, gathered input (the MLP's embedding concatenation)
    E = rand_leaves(rng, 10, shape=(5, 2))
    W2 = rand_leaves(rng, 12, shape=(2, 6))
    fd_check(lambda: bt.linear(bt.embedding(E, [4, 0, 4]).flatten(), W2, None).sigmoid().sum(), [E, W2], rng)


def test_softmax_and_cross_entropy(arena, rng):
    z = rand_leaves(rng, 12, shape=(3, 4), scale=3.0)
    p = bt.softmax(z)
    for r in range(3):
        row = z[r].data
        e = [math.exp(v) for v in row]
        assert p[r].data == pytest.approx([v / sum(e) for v in e])
    w = rand_leaves(rng, 12, shape=(3, 4))
    fd_check(lambda: (bt.softmax(z) * w).sum(), [z, w], rng)
    t = [2, 0, 3]
    loss = bt.cross_entropy(z, t)
    ref = sum(math.log(sum(math.exp(v) for v in z[r].data)) - z[r].data[t[r]] for r in range(3)) / 3
    assert loss.data == pytest.approx(ref)
    fd_check(lambda: bt.cross_entropy(z, t), [z], rng)
    fd_check(lambda: bt.cross_entropy(z.columns(1, 4), [0, 1, 2]), [z], rng)


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@pytest.mark.parametrize("V", [27, 65])
def test_cross_entropy_rows_in_lanes(dtype, V, rng):
    """37 rows: two blocks that the kernels take across SIMD lanes, then five row by row; loss and
    every gradient against double-precision math, and a NaN logit kept to its own row."""
    rows = 37
    zs = [rng.uniform(-4.0, 4.0) for _ in range(rows * V)]
    t = [rng.randrange(V) for _ in range(rows)]
    ref_rows, ref_grad = [], []
    for r in range(rows):
        row = zs[r * V:(r + 1) * V]
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = sum(e)
        ref_rows.append(m + math.log(s) - row[t[r]])
        ref_grad += [(ev / s - (j == t[r])) / rows for j, ev in enumerate(e)]
    tol = 2e-6 if dtype == bt.float32 else 1e-12
    with bt.Arena(dtype=dtype):
        z = bt.leaves(zs, shape=(rows, V), dtype=dtype)
        loss = bt.cross_entropy(z, t)
        loss.backward()
        assert loss.data == pytest.approx(sum(ref_rows) / rows, rel=tol)
        assert z.grad == pytest.approx(ref_grad, rel=tol, abs=tol / rows)
    zs[3 * V + 5] = math.nan  # row 3, in the first block of lanes
    with bt.Arena(dtype=dtype):
        z = bt.leaves(zs, shape=(rows, V), dtype=dtype)
        loss = bt.cross_entropy(z, t)
        loss.backward()
        g = z.grad
        assert math.isnan(loss.data)
        assert all(math.isnan(v) for v in g[3 * V:4 * V])
        others = [r for r in range(rows) if r != 3]
        assert all(g[r * V + j] == pytest.approx(ref_grad[r * V + j], rel=tol, abs=tol / rows)
                   for r in others for j in range(V))


def test_layer_norm(arena, rng):
    x = rand_leaves(rng, 15, shape=(3, 5), scale=2.0)
    g = rand_leaves(rng, 5)
    b = rand_leaves(rng, 5)
    y = bt.layer_norm(x, g, b)
    row = x[1].data
    m = sum(row) / 5
    var = sum((v - m) ** 2 for v in row) / 5
    assert y[1].data == pytest.approx([(v - m) / math.sqrt(var + 1e-5) * gg + bb
                                       for v, gg, bb in zip(row, g.data, b.data)])
    c = rand_leaves(rng, 15, shape=(3, 5))
    fd_check(lambda: (bt.layer_norm(x, g, b) * c).sum(), [x, g, b, c], rng, tol=1e-4)


def test_attention_one_head_and_heads_as_views(arena, rng):
    T, hs = 4, 3
    qkv = rand_leaves(rng, T * 3 * hs, shape=(T, 3 * hs))
    q, k, v = qkv.columns(0, hs), qkv.columns(hs, 2 * hs), qkv.columns(2 * hs, 3 * hs)
    out, w = bt.attention(q, k, v, return_weights=True)
    assert out.shape == (T, hs) and w.shape == (T, T)
    for i in range(T):  # causal rows sum to one, zeros above the diagonal
        assert sum(w[i].data) == pytest.approx(1.0)
        assert all(x == 0.0 for x in w[i].data[i + 1:])
    # reference for row 2
    qi = q[2].data
    s = [sum(a * b for a, b in zip(qi, k[j].data)) / math.sqrt(hs) for j in range(3)]
    e = [math.exp(x) for x in s]
    p = [x / sum(e) for x in e]
    assert out[2].data == pytest.approx([sum(p[j] * v[j].data[c] for j in range(3)) for c in range(hs)])
    c = rand_leaves(rng, T * hs, shape=(T, hs))
    fd_check(lambda: (bt.attention(q, k, v) * c).sum(), [qkv, c], rng, tol=1e-4)
    # weights are nodes too: a loss on them differentiates through the softmax
    fd_check(lambda: bt.attention(q, k, v, return_weights=True)[1].sqr().sum(), [qkv], rng, tol=1e-4)
    # stacked sequences: attention stays within each sequence
    qkv2 = rand_leaves(rng, 3 * T * 3 * 4, shape=(3 * T, 3 * 4))
    stacked = bt.multi_head_attention(qkv2, 2, sequences=3)
    for s_ in range(3):
        alone = bt.multi_head_attention(qkv2[s_ * T:(s_ + 1) * T], 2)
        assert stacked[s_ * T:(s_ + 1) * T].data == pytest.approx(alone.data, rel=1e-12)
    c2 = rand_leaves(rng, 3 * T * 4, shape=(3 * T, 4))
    fd_check(lambda: (bt.multi_head_attention(qkv2, 2, sequences=3) * c2).sum(), [qkv2], rng, tol=1e-4)
    with pytest.raises(ValueError, match="sequences"):
        bt.multi_head_attention(qkv2, 2, sequences=5)
    # two heads concatenated as a view feed a linear layer
    Wo = rand_leaves(rng, 2 * hs * 2, shape=(2, 2 * hs))
    def two_heads():
        h0 = bt.attention(q, k, v)
        h1 = bt.attention(k, q, v, causal=False)
        return bt.linear(bt.hcat([h0, h1]), Wo).tanh().sum()
    fd_check(two_heads, [qkv, Wo], rng, tol=1e-4)


def test_scalar_and_range_ops_mix(arena, rng):
    x = rand_leaves(rng, 5)
    a = bt.Value(0.7)
    def build():
        s = x.tanh().sum()
        return bt.reduce_mean([s * a, x[0] * x[4], bt.vsum(x)]) ** 2
    fd_check(build, [x], rng)
    with bt.scope():
        a.zero_grad()
        build().backward()
        g = a.grad
    with bt.scope():
        up = (a.data, setattr(a, "data", a.data + 1e-6), build().data)[2]
    a.data -= 1e-6
    with bt.scope():
        dn = (setattr(a, "data", a.data - 1e-6), build().data)[1]
    a.data += 1e-6
    assert g == pytest.approx((up - dn) / 2e-6, rel=1e-5)


def test_stale_views_and_bad_shapes(arena, rng):
    W = rand_leaves(rng, 6, shape=(2, 3))
    cp = arena.checkpoint()
    h = bt.linear(rand_leaves(rng, 3), W)
    arena.rewind(cp)
    with pytest.raises(bt.StaleValueError):
        h.sum()
    with pytest.raises(bt.StaleValueError):
        h.data
    x = rand_leaves(rng, 4)
    with pytest.raises(ValueError, match="expects 3 inputs"):
        bt.linear(x, W)
    with pytest.raises(ValueError, match="contiguous"):
        bt.linear(rand_leaves(rng, 2), bt.leaves(shape=(4, 4)).columns(0, 2))
    with pytest.raises(IndexError, match="out of range"):
        bt.cross_entropy(rand_leaves(rng, 3), 3)
    with pytest.raises(ValueError, match="targets"):
        bt.cross_entropy(rand_leaves(rng, 6, shape=(2, 3)), [0])
    with pytest.raises(IndexError, match="token id 5"):
        bt.embedding(W, [5])
    with pytest.raises(ValueError, match="lengths differ"):
        rand_leaves(rng, 3) + rand_leaves(rng, 4)
    with pytest.raises(ValueError):
        bt.leaves([])
    with pytest.raises(TypeError):
        bt.leaves("abc")
    with pytest.raises(ValueError, match="reshape"):
        x.reshape(3, 3)
    with pytest.raises(TypeError):
        bt.leaves([1.0], dtype=bt.float32) + bt.leaves([1.0])


def test_against_pytorch(rng):
    torch = pytest.importorskip("torch")
    arena = bt.Arena()
    with arena:
        T, C, V = 5, 6, 7
        xs = [rng.uniform(-1, 1) for _ in range(T * C)]
        ws = [rng.uniform(-1, 1) for _ in range(V * C)]
        bs = [rng.uniform(-1, 1) for _ in range(V)]
        gs = [rng.uniform(0.5, 1.5) for _ in range(C)]
        be = [rng.uniform(-1, 1) for _ in range(C)]
        t = [rng.randrange(V) for _ in range(T)]
        x, W, b = bt.leaves(xs, shape=(T, C)), bt.leaves(ws, shape=(V, C)), bt.leaves(bs)
        g, beta = bt.leaves(gs), bt.leaves(be)
        h = bt.layer_norm(x, g, beta)
        a = bt.attention(h.columns(0, 3), h.columns(3, 6), h.columns(0, 3))
        z = bt.linear(bt.hcat([a, h.columns(3, 6)]).relu(), W, b)
        loss = bt.cross_entropy(z, t)
        loss.backward()

        f64 = dict(dtype=torch.float64, requires_grad=True)
        tx, tW, tb = torch.tensor(xs, **f64), torch.tensor(ws, **f64), torch.tensor(bs, **f64)
        tg, tbe = torch.tensor(gs, **f64), torch.tensor(be, **f64)
        th = torch.nn.functional.layer_norm(tx.view(T, C), (C,), tg, tbe, eps=1e-5)
        ta = torch.nn.functional.scaled_dot_product_attention(
            th[:, 0:3][None], th[:, 3:6][None], th[:, 0:3][None], is_causal=True)[0]
        tz = torch.relu(torch.cat([ta, th[:, 3:6]], dim=1)) @ tW.view(V, C).T + tb
        tl = torch.nn.functional.cross_entropy(tz, torch.tensor(t))
        tl.backward()
        assert loss.data == pytest.approx(tl.item(), rel=1e-12)
        for mine, theirs in [(x, tx), (W, tW), (b, tb), (g, tg), (beta, tbe)]:
            assert mine.grad == pytest.approx(theirs.grad.tolist(), rel=1e-9, abs=1e-12)
