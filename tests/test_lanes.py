"""Lane replay (csrc/lanes/): a program of scalar ops replayed over blocks of SIMD lanes gives,
sample for sample, the bits of the one-sample replay (lanes off), FP32 and FP64, on every op of
the op table, on random graphs, with guards (lanes that disagree at a guard), for N not a multiple
of the block; map(out=...) writes into the caller's arrays and refuses bad ones clearly."""
import random

import numpy as np
import pytest
from hypothesis import given, settings

import burtorch as bt
from burtorch import _core
from burtorch.paper_graphs import w1_expr, w2_expr
from lane_bits import DTYPES, bits, lanes_restored  # noqa: F401 (lanes_restored: an autouse fixture)
from op_table import BINARY, NARY, UNARY
from test_random_graphs import evaluate, inputs, programs


def run(f, X, on, **kw):
    _core.set_lanes_enabled(on)
    try:
        return f.map(X, **kw)
    finally:
        _core.set_lanes_enabled(True)


def assert_lanes_match_one_sample(fn, X, dtype, reduce=None):
    """Lanes on vs off, bitwise: values and grads (rows, or the mean)."""
    # one compiled function each: a failed guard adds a variant, and .map replays the newest
    f0, f = (bt.value_and_grad(fn, argnums=tuple(range(X.shape[1])), dtype=dtype) for _ in range(2))
    v1, g1 = run(f, X, True, reduce=reduce)
    v0, g0 = run(f0, X, False, reduce=reduce)
    assert f.traces == f0.traces
    np.testing.assert_array_equal(bits(v1), bits(v0))
    np.testing.assert_array_equal(bits(g1), bits(g0))
    return f, v1, g1


def test_lane_width_follows_the_build():
    w64, w32 = _core.lane_width(bt.float64), _core.lane_width(bt.float32)
    assert w32 == 2 * w64
    want = {"avx512": 8, "avx2": 4}.get(_core.simd)
    if want is not None:
        assert w64 == want
    for half in ("float16", bt.bfloat16):
        with pytest.raises(TypeError, match="float32 and float64"):
            _core.lane_width(half)
    with pytest.raises(TypeError):
        _core.lane_width("int8")


def test_lanes_are_used_and_match_one_sample_w1_w2():
    rng = np.random.default_rng(0)
    for dtype in DTYPES:
        for N in (2, 37, 1000):  # one partial block, several blocks and a partial one
            X = rng.uniform(-3, 3, size=(N, 2))
            assert_lanes_match_one_sample(w1_expr, X, dtype)
            assert_lanes_match_one_sample(lambda a, b: w2_expr(a, b)[-1], X, dtype)
            assert_lanes_match_one_sample(w1_expr, X, dtype, reduce="mean")
    assert _core.lanes_enabled()


# Points where ops have kinks, zeros and signed zeros: a lane whose output grad is zero must
# leave its argument grads untouched, as the one-sample sweep skips its record.
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops(name, dtype):
    f, _, sample = UNARY[name]
    rng = random.Random(name)
    X = np.array([[sample(rng)] for _ in range(45)] + [[e] for e in EDGES])
    with np.errstate(all="ignore"):
        assert_lanes_match_one_sample(lambda x: f(x), X, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops(name, dtype):
    f, _, (sa, sb) = BINARY[name]
    rng = random.Random(name)
    X = np.array([[sa(rng), sb(rng)] for _ in range(45)] + [[e, e] for e in EDGES])
    assert_lanes_match_one_sample(lambda a, b: f(a, b), X, dtype)
    # one slot as both operands (x * x, x - x): both contributions go into it, in order
    assert_lanes_match_one_sample(lambda a, b: f(a, a) + b, X, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(NARY))
def test_nary_ops(name, dtype):
    f = NARY[name][0]
    rng = np.random.default_rng(3)
    k = 5 if name == "inner_product_with_bias" else 4
    X = rng.uniform(-2.0, 2.0, size=(41, k))
    X[3] = 0.0  # every output grad of a reduction of zeros, products with zeros
    assert_lanes_match_one_sample(lambda *xs: f(list(xs)), X, dtype)
    # repeated arguments: the same slot's grad added to several times in one record
    assert_lanes_match_one_sample(lambda *xs: f([xs[0], xs[0]] + list(xs[2:])) + xs[1], X, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=40, deadline=None)
@given(programs, inputs)
def test_random_graphs(dtype, program, xs):
    rng = np.random.default_rng(len(program))
    X = np.vstack([xs, rng.uniform(-2, 2, size=(22, 3))])
    assert_lanes_match_one_sample(lambda a, b, c: evaluate(program, [a, b, c], bt), X, dtype)


def branchy(a, b):
    if a > b:  # a guard: lanes that disagree with the traced branch fail and are recomputed
        return a * b + bt.tanh(a)
    return a - b


@pytest.mark.parametrize("dtype", DTYPES)
def test_guards_lanes_disagree(dtype):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(53, 2))
    X[0] = (2.0, 1.0)  # traced on the a > b branch; about half the lanes of each block disagree
    f, values, grads = assert_lanes_match_one_sample(branchy, X, dtype)
    assert f.traces == 2
    for i, (a, b) in enumerate(X):
        want = (a * b + np.tanh(a)) if a > b else a - b
        assert values[i] == pytest.approx(want, rel=1e-5)
    # the program's own replay reports the same failed samples with lanes on and off
    prog = f.programs()[0]
    out = [np.empty((53, 2), dtype=np.float64 if dtype == bt.float64 else np.float32) for _ in range(2)]
    vals = [np.full(53, 7.0) for _ in range(2)]
    ids = np.zeros((53, 0), np.int64)
    failed = []
    for on, o, v in zip((True, False), out, vals):
        _core.set_lanes_enabled(on)
        failed.append(prog._replay(X, ids, "rows", 1.0, v, o))
    _core.set_lanes_enabled(True)
    assert failed[0] == failed[1] == [i for i, (a, b) in enumerate(X) if not a > b]
    ok = [i for i in range(53) if i not in failed[0]]
    np.testing.assert_array_equal(bits(out[0][ok]), bits(out[1][ok]))
    np.testing.assert_array_equal(bits(vals[0]), bits(vals[1]))  # failed samples: left as they were


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", [None, "mean"])
def test_failed_samples_go_through_traced_variants_in_lanes(dtype, reduce, monkeypatch):
    """Once both branches are traced, a .map whose lanes disagree recomputes the failing samples
    by replaying the other variant over them (no call per sample), with the numbers of a call per
    sample: the one-sample map's bits, and for a mean its order (failed samples last, ascending)."""
    rng = np.random.default_rng(12)
    X = rng.normal(size=(203, 2))
    X[0] = (2.0, 1.0)
    f = bt.value_and_grad(branchy, argnums=(0, 1), dtype=dtype)
    f.map(X)  # traces a > b, then a <= b for the first sample that fails
    assert f.traces == 2

    def one_call_per_failed_sample(Xo):
        """What .map computed before: the newest variant over all samples, then a call per
        sample it failed (there, the older variant dropped, so the call traces it again)."""
        f0 = bt.value_and_grad(branchy, argnums=(0, 1), dtype=dtype)
        run(f0, X, False)  # the same history: a > b traced first, then a <= b
        for progs in f0._cache.values():
            del progs[:-1]
        want = run(f0, Xo, False, reduce=reduce)
        assert f0.traces == 3
        return want

    for Xo in (X, X[::-1].copy()):
        calls = []
        monkeypatch.setattr(f, "_call_raw", lambda args: calls.append(args))
        v1, g1 = f.map(Xo, reduce=reduce)
        monkeypatch.undo()
        assert calls == [] and f.traces == 2
        v0, g0 = one_call_per_failed_sample(Xo)
        np.testing.assert_array_equal(bits(v1), bits(v0))
        np.testing.assert_array_equal(bits(g1), bits(g0))
    # a third branch is still traced by a call
    cube = bt.value_and_grad(lambda a: a * 2.0 if a > 1 else (a * a if a > -1 else -a), dtype=dtype)
    xs = np.array([2.0, 0.5, -2.0, 3.0, 0.0, -3.0])
    v, g = cube.map(xs)
    assert cube.traces == 3
    assert v.tolist() == [4.0, 0.25, 2.0, 6.0, 0.0, 3.0]
    assert g.ravel().tolist() == [2.0, 1.0, -1.0, 2.0, 0.0, -1.0]


def test_guards_mean_keeps_order():
    X = np.random.default_rng(6).normal(size=(300, 2))
    X[0] = (2.0, 1.0)
    assert_lanes_match_one_sample(branchy, X, bt.float64, reduce="mean")


def test_captured_values_and_constants():
    w = bt.Value(0.75)

    def fn(x, y):
        return bt.tanh(x * w + 0.5) * y - bt.reduce_sum([x, y, w])

    X = np.random.default_rng(7).normal(size=(19, 2))
    f, _, grads = assert_lanes_match_one_sample(fn, X, bt.float64)
    w.data = -2.0  # parameters are read per call
    _, grads2 = f.map(X)
    assert not np.array_equal(grads, grads2)
    assert_lanes_match_one_sample(fn, X, bt.float64)


def test_range_programs_still_replay():
    """A program with a range op runs one sample at a time: the same numbers either way."""
    def fn(a, b):
        v = bt.vector([a, b, a * b])
        return bt.vsum(v.tanh())

    X = np.random.default_rng(8).normal(size=(20, 2))
    assert_lanes_match_one_sample(fn, X, bt.float64)


# ---------------------------------------------------------------- map(out=...)
def test_map_out_writes_into_caller_arrays():
    f = bt.value_and_grad(w1_expr, argnums=(0, 1))
    X = np.random.default_rng(9).uniform(-3, 3, size=(77, 2))
    want_v, want_g = f.map(X)
    v, g = np.full(77, np.nan), np.full((77, 2), np.nan)
    rv, rg = f.map(X, out=(v, g))
    assert rv is v and rg is g
    np.testing.assert_array_equal(v, want_v)
    np.testing.assert_array_equal(g, want_g)
    m = np.full(2, 5.0)  # a mean overwrites what was there
    assert f.map(X, reduce="mean", out=(None, m))[1] is m
    np.testing.assert_array_equal(m, f.map(X, reduce="mean")[1])
    g_only = bt.grad(w1_expr, argnums=(0, 1), dtype=bt.float32)
    g32 = np.empty((77, 2), np.float32)
    assert g_only.map(X, out=g32) is g32
    np.testing.assert_array_equal(g32, g_only.map(X))
    # a non-contiguous X is read as its values (a copy), not as raw memory
    wide = np.zeros((77, 4))
    wide[:, ::2] = X
    np.testing.assert_array_equal(f.map(wide[:, ::2])[1], want_g)


def test_map_out_under_anomaly_mode():
    f = bt.value_and_grad(w1_expr, argnums=(0, 1))
    X = np.random.default_rng(10).uniform(-3, 3, size=(5, 2))
    v, g = np.empty(5), np.empty((5, 2))
    with bt.detect_anomaly():
        rv, rg = f.map(X, out=(v, g))
    assert rv is v and rg is g
    np.testing.assert_array_equal(g, f.map(X)[1])


def test_map_out_bad_arrays_raise_and_write_nothing():
    f = bt.value_and_grad(w1_expr, argnums=(0, 1))
    X = np.random.default_rng(11).uniform(-3, 3, size=(8, 2))
    v = np.full(8, 3.0)
    good = np.zeros((8, 2))
    bad = [
        (TypeError, good, "pair"),
        (TypeError, (v, [[0.0, 0.0]] * 8), "numpy array"),
        (TypeError, (v, np.zeros((8, 2), np.float32)), "dtype float64"),
        (TypeError, (v.astype(np.float32), good), "dtype float64"),
        (ValueError, (v, np.zeros((8, 3))), r"shape \(8, 2\)"),
        (ValueError, (np.zeros(7), good), r"shape \(8,\)"),
        (ValueError, (v, np.zeros((2, 8)).T), "C-contiguous"),
        (ValueError, (v, np.zeros((16, 2))[::2]), "C-contiguous"),
    ]
    ro = np.zeros((8, 2))
    ro.flags.writeable = False
    bad.append((ValueError, (v, ro), "read-only"))
    buf = np.zeros(8 * 3)
    bad.append((ValueError, (buf[:8], buf[8:].reshape(8, 2)), None))  # fine: no overlap
    bad.append((ValueError, (buf[:8], buf[:16].reshape(8, 2)), "overlap"))
    for exc, out, msg in bad:
        if msg is None:
            f.map(X, out=out)
            continue
        with pytest.raises(exc, match=msg):
            f.map(X, out=out)
        assert (v == 3.0).all()
    # out= must not overlap what the replay reads: X (as passed, or as converted) and the ids
    XX = X.copy()
    for out in ((v, XX), (XX.reshape(-1)[8:], good), (XX.reshape(-1)[:8], None)):
        with pytest.raises(ValueError, match="overlaps the inputs"):
            f.map(XX, out=out)
        np.testing.assert_array_equal(XX, X)
        assert (v == 3.0).all() and (good == 0.0).all()
    f.map(XX, out=(v.copy(), XX.copy()))  # copies of them are fine
    buf = X.copy()  # a strided X is read through a copy; out= over the caller's X is refused anyway
    with pytest.raises(ValueError, match="overlaps the inputs"):
        f.map(buf[:, ::-1], out=(v, buf))
    np.testing.assert_array_equal(buf, X)
    ids = np.arange(8, dtype=np.int64)
    fi = bt.value_and_grad(lambda a, i: a * 2.0, ids=(1,))
    with pytest.raises(ValueError, match="overlaps the inputs"):
        fi.map(X[:, 0].copy(), ids=[ids], out=(ids.view(np.float64), np.zeros((8, 1))))
    np.testing.assert_array_equal(ids, np.arange(8))
    # a non-finite input is refused before anything is written
    Xn, gg = X.copy(), np.full((8, 2), 3.0)
    Xn[5, 1] = np.nan
    with pytest.raises(ValueError, match="sample 5, input 1 is not finite"):
        f.map(Xn, out=(v, gg))
    assert (v == 3.0).all() and (gg == 3.0).all()
    with pytest.raises(TypeError, match="dtype float64"):
        f.map(X, reduce="mean", out=(None, np.zeros(2, np.float32)))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        f.map(X, reduce="mean", out=(None, good))
    with pytest.raises(TypeError, match="X must hold real numbers"):
        f.map(X.astype(str))
    with pytest.raises(ValueError, match="different numbers of samples"):
        bt.value_and_grad(lambda a, i: a, ids=(1,)).map(X[:, 0], ids=[np.zeros(7, np.int64)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_streamed_outputs_match_one_sample(dtype):
    # Outputs of a megabyte and more leave a wide block's lanes through streaming stores, whole
    # registers at aligned addresses, the ends and a short block's tail through ordinary ones:
    # out= arrays one element off alignment, N not a multiple of a block, and a few blocks where
    # lanes fail the guard (those blocks are written lane by lane, the streams resume after them).
    N = 70_003
    rng = np.random.default_rng(12)
    X = np.column_stack([rng.uniform(1.0, 2.0, N), rng.uniform(-2.0, 0.5, N)])
    disagree = [1, 1000, 1001, 40_000, N - 1]
    X[disagree] = (-1.0, 1.0)
    X[0] = (2.0, 1.0)
    gdt = np.float64 if dtype == bt.float64 else np.float32
    f, f0 = (bt.value_and_grad(branchy, argnums=(0, 1), dtype=dtype) for _ in range(2))
    v0, g0 = run(f0, X, False)
    vbuf, gbuf = np.full(N + 1, 7.0), np.full(2 * N + 1, 7.0, gdt)
    v, g = vbuf[1:], gbuf[1:].reshape(N, 2)  # one element past the buffers' aligned start
    assert run(f, X, True, out=(v, g))[0] is v
    np.testing.assert_array_equal(bits(v), bits(v0))
    np.testing.assert_array_equal(bits(g), bits(g0))
    assert vbuf[0] == 7.0 and gbuf[0] == 7.0
    # the program's own replay: the failed samples reported and left as they were
    prog = f.programs()[0]
    vals, rows = np.full(N, 3.0), np.full((N, 2), 3.0, gdt)
    failed = prog._replay(X, np.zeros((N, 0), np.int64), "rows", 1.0, vals, rows)
    assert failed == disagree
    assert (vals[disagree] == 3.0).all() and (rows[disagree] == 3.0).all()
    ok = np.setdiff1d(np.arange(N), disagree)
    np.testing.assert_array_equal(bits(vals[ok]), bits(v0[ok]))
    np.testing.assert_array_equal(bits(rows[ok]), bits(g0[ok]))


def test_map_replays_a_traced_signature_and_retraces_a_dead_one():
    # .map looks a signature up without reading sample 0 as arguments; a program whose captured
    # values were rewound away is not replayed but traced again
    cp = bt.checkpoint()
    held = [bt.Value(3.0)]
    f = bt.value_and_grad(lambda x: x * held[0])
    X = np.array([1.0, 2.0, 4.0])
    for _ in range(2):
        v, g = f.map(X)
        np.testing.assert_array_equal(v, 3.0 * X)
        np.testing.assert_array_equal(g, [[3.0]] * 3)
    assert f.traces == 1
    bt.rewind(cp)
    held[0] = bt.Value(5.0)  # the rewound slot, reused
    assert not f.programs()[0].alive
    np.testing.assert_array_equal(f.map(X)[0], 5.0 * X)
    assert f.traces == 2
    # id arguments: an int per sample and a list per sample are signatures of their own (the
    # list's length is part of it)
    E = bt.leaves([[1.0], [2.0], [3.0]])
    h = bt.value_and_grad(lambda x, ii: x * bt.vsum(bt.embedding(E, ii)), ids=(1,))
    np.testing.assert_array_equal(h.map(X, ids=[np.array([[0, 1], [1, 2], [2, 2]])])[0], X * [3, 5, 6])
    np.testing.assert_array_equal(h.map(X, ids=[np.array([[0], [1], [2]])])[0], X * [1, 2, 3])
    np.testing.assert_array_equal(h.map(X, ids=[np.array([0, 1, 2])])[0], X * [1, 2, 3])
    assert h.traces == 3
    with pytest.raises(ValueError, match="id arguments"):
        h.map(X)


@pytest.mark.parametrize("N", [43_000, 44_000, 70_016])
def test_streamed_grads_alone_across_the_threshold(N):
    # grad(...).map writes rows only: FP64 rows of 2 reach a megabyte at 65,536 samples, values
    # and rows together (value_and_grad) at 43,691. Around those counts and at a multiple of the
    # block, with aligned and unaligned arrays, every path gives the one-sample bits.
    rng = np.random.default_rng(N)
    X = rng.uniform(-3, 3, size=(N, 2))
    v0, g0 = run(bt.value_and_grad(w1_expr, argnums=(0, 1)), X, False)
    f, fg = bt.value_and_grad(w1_expr, argnums=(0, 1)), bt.grad(w1_expr, argnums=(0, 1))
    for shift in (0, 1):
        vbuf, gbuf = np.empty(N + shift), np.empty(2 * N + shift)
        v, g = vbuf[shift:], gbuf[shift:].reshape(N, 2)
        f.map(X, out=(v, g))
        np.testing.assert_array_equal(bits(v), bits(v0))
        np.testing.assert_array_equal(bits(g), bits(g0))
        g.fill(np.nan)
        assert fg.map(X, out=g) is g
        np.testing.assert_array_equal(bits(g), bits(g0))
        f.map(X, out=(None, g))
        np.testing.assert_array_equal(bits(g), bits(g0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_streamed_values_with_a_mean_and_alone(dtype):
    # values alone reach a megabyte at 131,072 samples: .map with reduce="mean" (values streamed,
    # grads summed) and the forward-only replay ("values") stream them
    N = 131_200
    X = np.random.default_rng(13).uniform(-3, 3, size=(N, 2))
    assert_lanes_match_one_sample(w1_expr, X, dtype, reduce="mean")
    prog = bt.value_and_grad(w1_expr, argnums=(0, 1), dtype=dtype)
    prog.map(X[:2])
    (p,) = prog.programs()
    got = []
    for on in (True, False):
        vbuf = np.full(N + 1, 7.0)
        _core.set_lanes_enabled(on)
        try:
            assert p._replay(X, None, "values", 1.0, vbuf[1:], None) == []
        finally:
            _core.set_lanes_enabled(True)
        assert vbuf[0] == 7.0
        got.append(vbuf[1:])
    np.testing.assert_array_equal(bits(got[0]), bits(got[1]))
