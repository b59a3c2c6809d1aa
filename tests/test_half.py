"""bt.bfloat16 and bt.float16: rounding, gradients of the op table, range ops accumulating in float,
training, save/load, and the errors of what they do not support.

Tolerances come from each format's epsilon (the gap between 1 and the next number): bfloat16
2^-7, float16 2^-10. A stored value is its exact result rounded once (half an epsilon, relative);
a derivative read from a stored output (tanh's 1 - y^2) inherits that rounding, up to about one
epsilon absolute near saturation, hence gradients within 4 eps (|g| + 1).
"""
import bisect
import math
import random
import struct

import pytest

import burtorch as bt
from burtorch.nn import MakemoreMLP, MiniGPT
from burtorch.optim import SGD, AdamW
from op_table import BINARY, NARY, UNARY

HALF = {"bfloat16": (bt.bfloat16, 2.0 ** -7), "float16": (bt.float16, 2.0 ** -10)}


# ---------------------------------------------------------------- bit-exact references
def _all_finite(decode):
    """Every finite non-negative value of a 16-bit format, sorted, with its bits."""
    out = []
    for bits in range(0x8000):
        x = decode(bits)
        if math.isfinite(x):
            out.append((x, bits))
    out.sort()
    return out


def _bf16_decode(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def _f16_decode(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]


_TABLES = {"bfloat16": _all_finite(_bf16_decode), "float16": _all_finite(_f16_decode)}
_VALUES = {fmt: [v for v, _ in t] for fmt, t in _TABLES.items()}


def reference_round(x: float, fmt: str) -> float:
    """x rounded to nearest, ties to the even bit pattern, overflowing to inf: by search over the
    format's every value (independent of the C++ code and of numpy)."""
    if math.isnan(x) or math.isinf(x):
        return x
    table = _TABLES[fmt]
    values = _VALUES[fmt]
    a = abs(x)
    top = table[-1][0]
    ulp_top = top - table[-2][0]
    if a >= top + ulp_top / 2:  # at or past the midpoint to the next power: inf (a tie goes to even, inf)
        return math.copysign(math.inf, x)
    i = bisect.bisect_left(values, a)
    if i == len(values):  # above the largest finite value, below the midpoint to inf
        r = top
    elif values[i] == a:
        r = a
    else:
        lo, hi = table[i - 1], table[i]
        dl, dh = a - lo[0], hi[0] - a
        r = lo[0] if dl < dh or (dl == dh and lo[1] % 2 == 0) else hi[0]
    return math.copysign(r, x)


def stored(x: float, dtype) -> float:
    with bt.Arena(dtype):
        return bt.Value(x).data


def _samples(fmt, n, seed):
    """Numbers across the format's range: normals, subnormals, overflow, exact ties, specials."""
    r = random.Random(seed)
    table = _TABLES[fmt]
    xs = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf]
    for _ in range(n):
        e = r.uniform(-27, 17) if fmt == "float16" else r.uniform(-135, 128)
        xs.append(r.choice([-1, 1]) * 2.0 ** e)
    for _ in range(n):  # exact midpoints between neighbours (ties), and next to them
        i = r.randrange(1, len(table) - 1)
        mid = (table[i][0] + table[i + 1][0]) / 2
        xs += [mid, -mid, math.nextafter(mid, 0.0), math.nextafter(mid, math.inf)]
    top = table[-1][0]
    xs += [top, (top + (top - table[-2][0]) / 2), math.nextafter(top + (top - table[-2][0]) / 2, 0.0)]
    return xs


@pytest.mark.parametrize("fmt", sorted(HALF))
def test_rounding_is_bit_exact_against_the_reference(fmt):
    dtype = HALF[fmt][0]
    xs = _samples(fmt, 400, seed=hash(fmt) & 0xFFFF)
    with bt.Arena(dtype):
        for x in xs:
            got = bt.Value(x).data
            want = reference_round(x, fmt)
            assert got == want and math.copysign(1, got) == math.copysign(1, want), (x, got, want)


def test_float16_rounding_agrees_with_numpy():
    np = pytest.importorskip("numpy")
    xs = _samples("float16", 400, seed=7)
    xs += [float(np.float32(x)) for x in xs if math.isfinite(x) and abs(x) < 3e38]  # float32 inputs too
    with bt.Arena(bt.float16):
        for x in xs:
            with np.errstate(over="ignore"):
                want = float(np.float16(x))
            assert bt.Value(x).data == want, x


@pytest.mark.parametrize("fmt", sorted(HALF))
def test_nan_stays_nan_and_arithmetic_rounds_once(fmt):
    dtype, _ = HALF[fmt]
    assert math.isnan(stored(math.nan, dtype))
    r = random.Random(3)
    with bt.Arena(dtype):
        for _ in range(300):
            a, b = bt.Value(r.uniform(-4, 4)), bt.Value(r.uniform(-4, 4))
            # a and b are stored values; their product and sum are exact in float, rounded once
            assert (a * b).data == reference_round(a.data * b.data, fmt)
            assert (a + b).data == reference_round(a.data + b.data, fmt)


def test_float16_overflow_and_subnormals():
    with bt.Arena(bt.float16):
        big = bt.Value(300.0)
        assert (big * big).data == math.inf
        assert bt.Value(65504.0).data == 65504.0 and bt.Value(65520.0).data == math.inf
        tiny = bt.Value(2.0 ** -24)
        assert tiny.data == 2.0 ** -24 and (tiny * 0.5).data == 0.0  # a tie: to the even zero
        assert (tiny * 1.5).data == 2.0 ** -23


# ---------------------------------------------------------------- gradients
def _fd(ref, xs, h=1e-6):
    out = []
    for i in range(len(xs)):
        up, dn = list(xs), list(xs)
        up[i] += h
        dn[i] -= h
        out.append((ref(up) - ref(dn)) / (2 * h))
    return out


def _check_graph(fmt, build, ref, xs):
    dtype, eps = HALF[fmt]
    xs = [stored(x, dtype) for x in xs]  # the reference sees the very inputs the format holds
    with bt.Arena(dtype):
        vs = [bt.Value(x) for x in xs]
        y = build(vs)
        y.backward()
        got_y, got_g = y.data, [v.grad for v in vs]
    want_y, want_g = ref(xs), _fd(ref, xs)
    assert abs(got_y - want_y) <= 2 * eps * abs(want_y) + 1e-300, (xs, got_y, want_y)
    for g, w in zip(got_g, want_g):
        assert abs(g - w) <= 4 * eps * (abs(w) + 1), (xs, got_g, want_g)


@pytest.mark.parametrize("fmt", sorted(HALF))
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients(fmt, name):
    f, ref, sampler = UNARY[name]
    r = random.Random(name)
    for _ in range(5):
        _check_graph(fmt, lambda vs: f(vs[0]), lambda xs: ref(xs[0]), [sampler(r)])


@pytest.mark.parametrize("fmt", sorted(HALF))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradients(fmt, name):
    f, ref, (sa, sb) = BINARY[name]
    r = random.Random(name)
    for _ in range(5):
        _check_graph(fmt, lambda vs: f(vs[0], vs[1]), lambda xs: ref(xs[0], xs[1]), [sa(r), sb(r)])


@pytest.mark.parametrize("fmt", sorted(HALF))
@pytest.mark.parametrize("name", sorted(NARY))
def test_nary_gradients(fmt, name):
    f, ref, least = NARY[name]
    r = random.Random(name)
    for n in (1, 3, 8):
        n = 2 * n if name == "inner_product" else 2 * n + 1 if name == "inner_product_with_bias" else max(n, least)
        if name == "reduce_mul":  # keep the product near 1, where both formats are precise
            xs = [r.uniform(0.8, 1.25) for _ in range(n)]
        else:
            xs = [r.uniform(-2, 2) for _ in range(n)]
        _check_graph(fmt, f, ref, xs)


@pytest.mark.parametrize("fmt", sorted(HALF))
def test_range_sums_accumulate_in_float(fmt):
    # 1 + 1 + ... in a 16-bit accumulator stops at 256 (bfloat16) or 2048 (float16)
    dtype, _ = HALF[fmt]
    with bt.Arena(dtype):
        ones = bt.vector([1.0] * 4096)
        assert bt.vsum(ones).data == 4096.0
        assert bt.dot(ones, ones).data == 4096.0
        assert bt.reduce_sum(list(ones)).data == 4096.0
        w = bt.leaves([[1.0] * 4096])
        assert bt.linear(ones, w).data == [4096.0]


def _copy_params(src, dst):
    for (_, a), (_, b) in zip(src.named_parameters(), dst.named_parameters()):
        b.set_data(a.data)


@pytest.mark.parametrize("fmt", sorted(HALF))
@pytest.mark.parametrize("model", ["gpt", "mlp"])
def test_range_op_models_match_float64(fmt, model):
    # attention, layer norm, linear, softmax and cross-entropy (gpt), lookup_linear (mlp): the
    # same (rounded) parameters in the half format and in float64; loss and gradient agree to a
    # few epsilon, the activations being stored rounded at every layer.
    dtype, eps = HALF[fmt]
    r = random.Random(5)
    if model == "gpt":
        make = lambda dt: MiniGPT(vocab=11, block=6, dim=8, layers=2, heads=2, dtype=dt)  # noqa: E731
        batch = [([r.randrange(11) for _ in range(6)], [r.randrange(11) for _ in range(6)]) for _ in range(3)]
    else:
        make = lambda dt: MakemoreMLP(vocab=27, block=4, emb=6, hidden=10, dtype=dt)  # noqa: E731
        batch = [([r.randrange(27) for _ in range(4)], r.randrange(27)) for _ in range(5)]
    with bt.Arena(dtype):
        h = make(dtype)
        loss_h = h.loss_batch(batch)
        loss_h.backward()
        gh = [g for _, p in h.named_parameters() for g in p.grad]
        params = [p.data for _, p in h.named_parameters()]
        lh = loss_h.data
    with bt.Arena(bt.float64):
        d = make(bt.float64)
        for (_, p), vals in zip(d.named_parameters(), params):
            p.set_data(vals)
        loss_d = d.loss_batch(batch)
        loss_d.backward()
        gd = [g for _, p in d.named_parameters() for g in p.grad]
        ld = loss_d.data
    assert abs(lh - ld) <= 4 * eps * abs(ld)
    err = math.sqrt(sum((a - b) ** 2 for a, b in zip(gh, gd)))
    norm = math.sqrt(sum(b * b for b in gd))
    assert err <= 8 * eps * norm, (err, norm)


# ---------------------------------------------------------------- training, state, save/load
@pytest.mark.parametrize("fmt", sorted(HALF))
def test_training_steps_lower_the_loss(fmt):
    from burtorch.data import default_text  # the embedded corpus every clone has

    dtype, _ = HALF[fmt]
    text = default_text()
    chars = sorted(set(text))
    ids = [chars.index(c) for c in text[:2000]]
    r = random.Random(0)
    with bt.Arena(dtype):
        model = MiniGPT.paper(vocab=len(chars), dtype=dtype)
        opt = AdamW(model.parameters(), lr=3e-3)
        starts = [r.randrange(len(ids) - 9) for _ in range(16)]
        batch = [(ids[s:s + 8], ids[s + 1:s + 9]) for s in starts]
        first = bt.grad_oracle(model, batch)
        for _ in range(15):
            opt.step()
            last = bt.grad_oracle(model, batch)
    assert last < first - 0.5, (first, last)


@pytest.mark.parametrize("fmt", sorted(HALF))
def test_sgd_keeps_steps_smaller_than_the_format_can_hold(fmt):
    # lr * g far below half an ulp of the weight: the master copy accumulates them
    dtype, eps = HALF[fmt]
    with bt.Arena(dtype):
        w = bt.vector([1.0])
        opt = SGD(w, lr=eps / 16)
        for _ in range(64):
            w.set_grad([-1.0])
            opt.step()
        assert w.data == [stored(1.0 + 64 * eps / 16, dtype)] and w.data[0] > 1.0
        state = opt.state_dict()
        assert state["buffers"][-1] == pytest.approx(1.0 + 4 * eps, rel=1e-6)  # the float32 master


@pytest.mark.parametrize("fmt", sorted(HALF))
def test_save_load_two_bytes_a_value(fmt, tmp_path):
    from burtorch import io

    dtype, _ = HALF[fmt]
    with bt.Arena(dtype):
        m = MakemoreMLP.paper(hidden=4, dtype=dtype)
        path = tmp_path / "m.bt"
        io.save_state_dict(m, path)
        header = io.decode_header(path.read_bytes()[:4096], path.stat().st_size)
        assert header.dtype == fmt and header.payload_bytes == 2 * m.num_parameters()
        m2 = MakemoreMLP.paper(hidden=4, dtype=dtype)
        io.load_state_dict(path, m2)
        assert [p.data for _, p in m2.named_parameters()] == [p.data for _, p in m.named_parameters()]
        loaded = io.load_state_dict(path)
        assert list(loaded["embed.weight"]) == m.state_dict()["embed.weight"].data
    with bt.Arena(bt.float32):
        with pytest.raises(io.FormatError, match=fmt):
            io.load_state_dict(path, MakemoreMLP.paper(hidden=4, dtype=bt.float32))


@pytest.mark.parametrize("fmt", sorted(HALF))
def test_bad_input_raises(fmt):
    dtype, _ = HALF[fmt]
    other = bt.Arena(bt.float32)
    with other:
        y = bt.Value(1.0)
    with bt.Arena(dtype):
        x = bt.Value(1.0)
        assert x.dtype == dtype
        with pytest.raises(TypeError):
            x + y  # noqa: B018 (mixing dtypes, as float32 with float64)
        with pytest.raises(TypeError, match="float32 and float64"):
            bt.trace(lambda a: a * a, [0.5], dtype=dtype)
        with pytest.raises(TypeError, match="float32 and float64"):
            bt.value_and_grad(lambda a: a * a, dtype=dtype)(0.5)
        with bt.detect_anomaly(), pytest.raises(bt.AnomalyError):
            bt.log(bt.Value(-1.0))  # nan
        with bt.detect_anomaly(), pytest.raises(bt.AnomalyError):
            bt.Value(2.0 ** 100 if fmt == "bfloat16" else 300.0) ** 3  # overflows the format: inf
        model = MakemoreMLP.paper(hidden=4, dtype=dtype)
        opt = SGD(model.parameters(), lr=0.1)
        with pytest.raises(TypeError, match="float32 and float64"):
            opt.fused_step(model, [([0] * 16, 1)])


@pytest.mark.parametrize("fmt", sorted(HALF))
def test_load_array_rounds_like_the_arena(fmt):
    np = pytest.importorskip("numpy")
    from burtorch.views import load_array

    dtype, _ = HALF[fmt]
    xs = [x for x in _samples(fmt, 300, seed=11) if abs(x) < 1e300]
    with bt.Arena(dtype), np.errstate(over="ignore"):
        v = bt.vector([0.0] * len(xs))
        load_array(v, np.array(xs))
        assert v.data == [reference_round(x, fmt) for x in xs]


@pytest.mark.parametrize("fmt", sorted(HALF))
def test_mlp_sgd_steps_lower_the_loss(fmt):
    from burtorch.data import default_words  # the embedded word list every clone has

    dtype, _ = HALF[fmt]
    words = default_words()[:200]
    chars = ["."] + sorted({c for w in words for c in w})
    samples = []
    for w in words:
        ctx = [0] * 3
        for c in w + ".":
            samples.append((list(ctx), chars.index(c)))
            ctx = ctx[1:] + [chars.index(c)]
    batch = random.Random(1).sample(samples, 32)
    with bt.Arena(dtype):
        model = MakemoreMLP(vocab=len(chars), block=3, emb=8, hidden=32, dtype=dtype)
        opt = SGD(model.parameters(), lr=0.2)
        first = bt.grad_oracle(model, batch)
        for _ in range(20):
            opt.step()
            last = bt.grad_oracle(model, batch)
    assert last < first - 0.5, (first, last)
