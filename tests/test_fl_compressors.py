"""The native compressors: statistics with fixed seeds (vectorised: many draws are cheap), exact
properties, bit counts, reproducibility from the seed alone, and bad input."""
import math

import numpy as np
import pytest

import burtorch as bt
from burtorch.fl import Identity, Natural, RandK, RandomDithering, RandSeqK, Scaled, TopK, make_compressor


def vec(d, seed=0):
    return np.random.default_rng(seed).standard_normal(d)


def draws(c, x, n):
    return np.array([c.compress(x, seed=s).dense() for s in range(n)])


@pytest.mark.parametrize("make", [lambda d: RandK(d, 3), lambda d: RandSeqK(d, 3), lambda d: Natural(d),
                                  lambda d: RandomDithering(d, 2), lambda d: RandomDithering(d, 1)])
def test_unbiased_compressors_mean_and_variance(make):
    d, n = 10, 20000
    c = make(d)
    x = vec(d, 7)
    ys = draws(c, x, n)
    sq = x @ x
    err = np.sum((ys - x) ** 2, axis=1)
    stderr = math.sqrt(c.omega * sq / n)
    assert np.all(np.abs(ys.mean(axis=0) - x) < 5 * stderr + 1e-12)
    assert err.mean() <= c.omega * sq * 1.05
    assert err.mean() > 0.0


@pytest.mark.parametrize("cls", [RandK, RandSeqK])
def test_sparsifier_variance_is_omega_exactly_in_expectation(cls):
    d, k, n = 8, 2, 20000
    c = cls(d, k)
    x = vec(d, 1)
    err = np.sum((draws(c, x, n) - x) ** 2, axis=1).mean()
    assert c.omega == d / k - 1
    assert abs(err - c.omega * (x @ x)) < 0.05 * c.omega * (x @ x)


def test_randseqk_sends_k_consecutive_coordinates_scaled():
    d, k = 10, 4
    x = np.arange(1.0, d + 1)
    starts = set()
    for s in range(200):
        m = RandSeqK(d, k).compress(x, seed=s)
        start = int(m.indices[0])
        starts.add(start)
        assert m.indices.tolist() == [(start + j) % d for j in range(k)]
        assert np.array_equal(m.values, x[m.indices] * d / k)
    assert starts == set(range(d))  # every start is reachable


@pytest.mark.parametrize("d,k", [(1, 1), (5, 1), (10, 3), (10, 10), (37, 8), (1000, 17)])
def test_topk_keeps_the_largest_and_contracts(d, k):
    c = TopK(d, k)
    assert c.alpha == k / d
    for seed in range(50):
        x = vec(d, seed)
        y = c.compress(x).dense()
        assert np.count_nonzero(y) == k
        kept = np.argsort(-np.abs(x), kind="stable")[:k]
        assert np.array_equal(y[kept], x[kept])
        assert np.sum((y - x) ** 2) <= (1 - c.alpha) * (x @ x) * (1 + 1e-12)


def test_topk_ties_go_to_the_lower_index():
    m = TopK(4, 2).compress([1.0, -1.0, 1.0, 1.0])
    assert m.indices.tolist() == [0, 1] and m.dense().tolist() == [1.0, -1.0, 0.0, 0.0]


def test_natural_compression_rounds_to_neighbouring_powers_of_two():
    x = np.array([0.0, 1.0, -3.0, 0.7, 1e-30, -2.5e20, 5.0])
    for s in range(100):
        y = Natural(len(x)).compress(x, seed=s).dense()
        for v, q in zip(x, y):
            if v == 0:
                assert q == 0
                continue
            low = 2.0 ** math.floor(math.log2(abs(v)))
            assert abs(q) in (low, 2 * low) and math.copysign(1, q) == math.copysign(1, v)
    assert Natural(7).compress(x, seed=3).dense()[1] == 1.0  # powers of two are kept exactly


def test_dithering_outputs_levels_of_the_norm():
    x = np.array([0.5, -1.5, 2.0])
    norm = np.linalg.norm(x)
    for s in range(50):
        y = RandomDithering(3, s=4).compress(x, seed=s).dense()
        levels = np.abs(y) / norm * 4
        assert np.allclose(levels, np.round(levels), atol=1e-12) and np.all(levels <= 4)
        assert np.all((y == 0) | (np.sign(y) == np.sign(x)))
    assert np.array_equal(RandomDithering(3, 4).compress(np.zeros(3), seed=1).dense(), np.zeros(3))


def test_scaled_is_contractive_in_expectation():
    d = 10
    c = Scaled(RandK(d, 2))
    assert c.alpha == pytest.approx(0.2) and c.bits == RandK(d, 2).bits
    x = vec(d, 3)
    err = np.sum((draws(c, x, 10000) - x) ** 2, axis=1).mean()
    assert err <= (1 - c.alpha) * (x @ x) * 1.03


def test_bits_of_each_message():
    assert (Identity(100).floats, Identity(100).bits) == (100, 3200)
    assert RandK(100, 5).bits == 5 * (32 + 7) and TopK(128, 4).bits == 4 * (32 + 7)
    assert RandSeqK(100, 5).bits == 5 * 32 + 7
    assert Natural(100).bits == 900 and Natural(100, float_bits=64).bits == 1200
    assert RandomDithering(100, 1).bits == 32 + 100 * 2 and RandomDithering(100, 3).bits == 32 + 100 * 3
    assert RandomDithering(100, 10).omega == pytest.approx(1.0)
    x = vec(100)
    for c in (Identity(100), RandK(100, 5), TopK(100, 5), RandSeqK(100, 5), Natural(100), RandomDithering(100, 3)):
        assert c.compress(x, seed=1).bits == c.bits


def test_the_seed_alone_fixes_the_message():
    x = vec(50)
    for make in (lambda: RandK(50, 4), lambda: RandSeqK(50, 4), lambda: Natural(50), lambda: RandomDithering(50, 3)):
        a, b = make(), make()
        assert np.array_equal(a.compress(x, seed=123).dense(), b.compress(x, seed=123).dense())
        assert not np.array_equal(a.compress(x, seed=1).dense(), a.compress(x, seed=2).dense())
        a.seed(9)
        b.seed(9)
        assert [a.compress(x).dense().tolist() for _ in range(3)] == [b.compress(x).dense().tolist() for _ in range(3)]


def test_float32_buffers_and_sequences():
    x = vec(20).astype(np.float32)
    m = TopK(20, 3).compress(x)
    assert m.values.dtype == np.float32
    as_float = x.astype(float)
    assert np.array_equal(RandK(20, 3).compress(x, seed=5).indices, RandK(20, 3).compress(as_float, seed=5).indices)
    assert Identity(3).compress([1, 2.5, -3]).dense().tolist() == [1.0, 2.5, -3.0]


def test_messages_add_into_an_accumulator():
    x = vec(10)
    acc = np.ones(10)
    TopK(10, 3).compress(x).add_to(acc, 0.5)
    expected = np.ones(10) + 0.5 * TopK(10, 3).compress(x).dense()
    assert np.array_equal(acc, expected)


def test_compress_grad_in_place_on_a_vector():
    v = bt.leaves([0.0, 0.0, 0.0, 0.0], dtype=bt.float64)
    v.set_grad([1.0, -4.0, 2.0, 3.0])
    TopK(4, 2).compress_grad_(v)
    assert v.grad == [0.0, -4.0, 0.0, 3.0]


def _top_k_reference(v, k):
    """The k largest |v| (ties: the lower index) in ascending index order, by numpy's sort."""
    order = np.lexsort((np.arange(len(v)), -np.abs(v)))[:k]
    return np.sort(order)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
# k * 64 > d selects by a partition of all d coordinates, smaller k by a heap of k (which gives
# way to the partition when more than d/16 coordinates would replace its root): all three here
@pytest.mark.parametrize("d,k", [(1, 1), (6, 2), (10, 10), (639, 10), (640, 10), (257, 5), (1000, 300), (5000, 40)])
def test_topk_of_a_difference_is_topk_of_the_difference_bitwise(d, k, dtype):
    rng = np.random.default_rng(d * 31 + k)
    for trial in range(24):
        # few distinct values in some trials: ties everywhere, in the heap and at its threshold;
        # magnitudes growing along the vector in others: every coordinate enters the heap
        a = (rng.integers(-3, 4, d) if trial % 2 else rng.standard_normal(d)).astype(dtype)
        b = (rng.integers(-3, 4, d) if trial % 3 == 0 else rng.standard_normal(d)).astype(dtype)
        if trial % 4 == 3:
            a = (np.arange(d) * (-1.0) ** np.arange(d)).astype(dtype)
        diff = a - b
        want = _top_k_reference(diff, k)
        fused = TopK(d, k).compress_difference(a, b)
        plain = TopK(d, k).compress(diff)
        for m in (fused, plain):
            assert m.indices.tolist() == want.tolist()
            assert m.values.dtype == dtype and m.values.tobytes() == diff[want].tobytes()
        assert fused.bits == plain.bits


def test_compress_difference_of_every_compressor_is_compress_of_the_difference():
    a, b = vec(50, 1), vec(50, 2)
    for c in (Identity(50), RandK(50, 5), RandSeqK(50, 5), Natural(50), RandomDithering(50, 2), Scaled(RandK(50, 5)),
              TopK(50, 5)):
        got, want = c.compress_difference(a, b, seed=7), c.compress(a - b, seed=7)
        assert got.values.tobytes() == want.values.tobytes()
        assert (got.indices is None) == (want.indices is None)
        assert got.indices is None or got.indices.tolist() == want.indices.tolist()
    # without a seed, the compressor's own stream moves on as compress() moves it
    one, two = TopK(50, 5, seed=3), RandK(50, 5, seed=3)
    one.compress_difference(a, b)
    two.compress_difference(a, b)
    assert one._calls == two._calls == 1
    # mixed types: numpy's promotion, as a - b
    mixed = TopK(50, 5).compress_difference(a.astype(np.float32), b)
    assert mixed.values.dtype == np.float64 and mixed.indices.tolist() == _top_k_reference(a.astype(np.float32) - b,
                                                                                             5).tolist()


def test_compress_difference_bad_input():
    with pytest.raises(ValueError, match="d=4"):
        TopK(4, 1).compress_difference(np.ones(4), np.ones(3))
    with pytest.raises(ValueError, match="coordinate of the difference 1 is not finite"):
        TopK(3, 1).compress_difference([1.0, float("nan"), 2.0], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="coordinate of the difference 2 is not finite"):
        TopK(3, 1).compress_difference([1.0, 1.0, 1e308], [0.0, 0.0, -1e308])  # overflow in a - b
    with pytest.raises(ValueError, match="coordinate 0 is not finite"):
        TopK(3, 3).compress([float("inf"), 1.0, 2.0])
    with pytest.raises(ValueError, match="same length"):
        bt._core.compress.top_k_diff(np.ones(3), np.ones(4), 1, np.empty(1, np.int64), np.empty(1))


def test_large_vectors_run_natively():
    d = 1_000_000
    x = vec(d)
    m = TopK(d, 10).compress(x)
    # the 10 largest magnitudes (no ties among normal draws), without sorting a million
    assert set(m.indices.tolist()) == set(np.argpartition(-np.abs(x), 10)[:10].tolist())


def test_bad_input():
    with pytest.raises(ValueError):
        RandK(5, 6)
    with pytest.raises(ValueError):
        TopK(5, 0)
    with pytest.raises(TypeError):
        TopK(5, 2.5)
    with pytest.raises(ValueError):
        RandomDithering(0)
    with pytest.raises(ValueError, match="d=3"):
        Identity(3).compress([1.0, 2.0])
    with pytest.raises(TypeError):
        Identity(2).compress([1.0, "x"])
    with pytest.raises(TypeError):
        Identity(2).compress(3.0)
    with pytest.raises(TypeError):
        Identity(2).compress(bt.leaves([1.0, 2.0]))
    with pytest.raises(TypeError):
        Scaled(TopK(3, 1))
    with pytest.raises(ValueError, match="not finite"):
        TopK(3, 1).compress([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="not finite"):
        RandomDithering(2).compress([float("inf"), 1.0], seed=1)
    with pytest.raises(ValueError, match="float_bits"):
        Natural(4, float_bits=8)
    with pytest.raises(ValueError, match="unknown compressor"):
        make_compressor("zip", 10)
    with pytest.raises(ValueError, match="needs k"):
        make_compressor("topk", 10)
    with pytest.raises(ValueError, match="k must be"):
        make_compressor("randk", 10, k=11)
    with pytest.raises(ValueError, match="scaled"):
        make_compressor("scaled-topk", 10, k=2)
    assert isinstance(make_compressor("scaled-natural", 10), Scaled)
