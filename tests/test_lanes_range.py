"""per_sample_grads over programs with range records (gather, linear, maps, cross-entropy): with
lanes enabled the records that reach the parameters write their parts of each row
(csrc/lanes/rows.hpp); the rows, the losses and the failures are bitwise those of the one-sample
replay (lanes off), FP32 and FP64, for N of 1, 2 and more, into fresh or reused outputs, aligned
or not, with ordinary or non-temporal stores (both forced through _core._set_rows_store; and
'discard', which makes the rows and stores none, leaves the output as it was; _core._stream_fill,
the benchmarks' streamed write floor, writes exactly its array);
programs that do not qualify keep the one-sample replay; bad input leaves out as it was; the rows
are the gradients (finite differences, and torch.func where installed)."""
import numpy as np
import pytest

import burtorch as bt
from burtorch import _core
from burtorch.nn import MakemoreMLP
from burtorch.oracle_compiled import sample_program
from lane_bits import DTYPES, bits, lanes_restored  # noqa: F401 (lanes_restored: an autouse fixture)


def model(dtype, vocab=11, block=3, emb=5, hidden=7, seed=0):
    m = MakemoreMLP(vocab=vocab, block=block, emb=emb, hidden=hidden, dtype=dtype)
    rng = np.random.default_rng(seed)
    pv = m.parameter_vector()
    pv.set_data((rng.normal(size=pv.size) * 0.5).tolist())
    return m


def batch_for(m, n, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, m.vocab, size=(n, m.block))
    Y = rng.integers(0, m.vocab, size=n)
    return [(x, int(y)) for x, y in zip(X.tolist(), Y.tolist())]


def per_sample(m, batch, on, out=None, **kw):
    _core.set_lanes_enabled(on)
    try:
        return bt.per_sample_grads(m, batch, out=out, **kw)
    finally:
        _core.set_lanes_enabled(True)


@pytest.fixture(autouse=True)
def rows_store_restored():
    yield
    _core._set_rows_store("auto")


def unaligned_like(G, shift):
    """An array shaped and typed as G, C-contiguous, starting `shift` bytes past a 64-byte
    boundary (so no row starts on a cache line), full of NaN."""
    raw = np.empty(G.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + shift
    out = raw[start:start + G.nbytes].view(G.dtype).reshape(G.shape)
    out.fill(np.nan)
    return out


def assert_rows_match(m, batch, **kw):
    G0, L0 = per_sample(m, batch, False, **kw)
    for how in ("auto", "plain", "stream"):  # the bits do not depend on how the rows are stored
        _core._set_rows_store(how)
        G1, L1 = per_sample(m, batch, True, **kw)
        assert np.array_equal(bits(G0), bits(G1)), how
        assert np.array_equal(bits(L0), bits(L1)), how
        # reused outputs full of other numbers, on a cache line's boundary or past it
        for shift in (0, G0.itemsize, 3 * G0.itemsize):
            out = unaligned_like(G0, shift)
            G2, L2 = per_sample(m, batch, True, out=out, **kw)
            assert G2 is out and np.array_equal(bits(G0), bits(out)), (how, shift)
            assert np.array_equal(bits(L0), bits(L2)), (how, shift)
    return G0


def test_rows_store_switch():
    assert _core._set_rows_store("plain") == "auto"
    assert _core._set_rows_store("stream") == "plain"
    assert _core._set_rows_store("discard") == "stream"
    assert _core._set_rows_store("stream") == "discard"
    with pytest.raises(ValueError, match="'auto', 'plain', 'stream' or 'discard'"):
        _core._set_rows_store("temporal")
    assert _core._set_rows_store("auto") == "stream"  # a bad value left the setting as it was
    assert _core._last_level_cache_bytes() >= 1 << 16


@pytest.mark.parametrize("dtype", DTYPES)
def test_discard_makes_the_rows_and_stores_none(dtype):
    """The benchmarks' compute-alone policy: the losses as ever, the output left as it was."""
    m = model(dtype, vocab=13, block=8, emb=8, hidden=5, seed=5)
    batch = batch_for(m, 11)
    G0, L0 = per_sample(m, batch, False)
    out = unaligned_like(G0, G0.itemsize)
    _core._set_rows_store("discard")
    G1, L1 = per_sample(m, batch, True, out=out)
    assert G1 is out and np.all(np.isnan(out))
    assert np.array_equal(bits(L0), bits(L1))
    _core._set_rows_store("auto")
    per_sample(m, batch, True, out=out)  # the rows path afterwards: the one-sample bits
    assert np.array_equal(bits(G0), bits(out))


@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 7, 16, 17, 100])
@pytest.mark.parametrize("shift", [0, 1, 3])
def test_stream_fill(np_dtype, n, shift):
    """The streamed write floor's fill: every element, whatever the length and the alignment, and
    nothing around them."""
    itemsize = np.dtype(np_dtype).itemsize
    raw = np.zeros(n + 40, np_dtype)
    start = ((-raw.ctypes.data) % 64) // itemsize + shift
    _core._stream_fill(raw[start:start + n], -2.5)
    want = np.zeros_like(raw)
    want[start:start + n] = -2.5
    assert np.array_equal(raw, want)
    _core._stream_fill(raw[start:start + n].reshape(n, 1), 4.0)  # any C-contiguous shape
    want[start:start + n] = 4.0
    assert np.array_equal(raw, want)


def test_stream_fill_refuses_what_it_cannot_write():
    a = np.zeros((4, 6), np.float32)
    with pytest.raises(TypeError, match="float32 or float64"):
        _core._stream_fill(np.zeros(8, np.int32), 1.0)
    with pytest.raises(TypeError):
        _core._stream_fill(a[:, ::2], 1.0)  # not contiguous: no silent copy written instead
    ro = np.zeros(8)
    ro.flags.writeable = False
    with pytest.raises(TypeError):
        _core._stream_fill(ro, 1.0)
    assert not np.any(a) and not np.any(ro)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 5, 37])
def test_rows_match_one_sample_small_mlp(dtype, n):
    m = model(dtype)
    batch = batch_for(m, n)
    assert _core._rows_by_records(sample_program(m, batch[0]))
    assert_rows_match(m, batch)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [4, 19])
def test_rows_match_one_sample_w4(dtype, hidden):
    """W4 as the benchmark runs it (block 16, embedding 64; FP32 there), N not a multiple of any
    width; repeated ids in a context add into one table row in order, with no other id between
    them or with some; the first layer's input and weight grads in one pass (its input 1,024, whole
    vectors: four at a time, then one, then the masked ends a row's alignment leaves); each row's
    buffered part streamed out over the next sample's forward, the last one's after the loop."""
    m = model(dtype, vocab=27, block=16, emb=64, hidden=hidden, seed=2)
    batch = batch_for(m, 21, seed=3)
    batch[0] = ([5] * 16, 3)
    batch[7] = ([1, 2, 1, 26, 2, 1] + [0] * 10, 26)
    assert _core._rows_by_records(sample_program(m, batch[0]))
    assert_rows_match(m, batch)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block, hidden, vocab", [(1, 1, 27), (2, 6, 64), (3, 9, 65), (5, 4, 100)])
def test_rows_match_one_sample_layer_over_a_lookup(dtype, block, hidden, vocab):
    """The first layer's forward taken with the lookup before it in one pass (each table row 64
    wide: whole steps of four vectors, FP32 and FP64), four units at a time, then one at a
    time (hidden 1, 6, 9), x's copy left in the frame for the layer's backward; the lookup's
    grads for tables of up to 64 rows (the rows read marked in one word) and of more (65, 100:
    zeroed first); one id repeated across the whole context, the table's last row read."""
    m = model(dtype, vocab=vocab, block=block, emb=64, hidden=hidden, seed=11)
    batch = batch_for(m, 10, seed=12)
    batch[4] = ([3] * block, 0)
    batch[6] = ([vocab - 1] * (block - 1) + [0], 1)
    assert _core._rows_by_records(sample_program(m, batch[0]))
    assert_rows_match(m, batch)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [3, 8, 32, 64])
def test_rows_match_one_sample_narrow_output_layers(dtype, hidden):
    """The output layer's forward runs across its units (in up to four vectors): its input one
    partial vector, several, exactly four (FP32 64, FP64 32: the chains' main loop), or more
    (the one-sample kernel again); a context that repeats one id adds into one table row."""
    m = model(dtype, vocab=27, block=4, emb=6, hidden=hidden, seed=7)
    batch = batch_for(m, 13, seed=8)
    batch[2] = ([9] * 4, 1)
    assert_rows_match(m, batch)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("emb", [8, 9, 12])
def test_rows_match_one_sample_wide_layers(dtype, emb):
    """A layer wide enough for its weight grads' whole cache lines to go into a reused output
    directly (the rest through the row's buffer), rows of W aligned or not with those lines; its
    input (64, 72, 96) whole vectors or not (the input and weight grads in one pass, or the two
    loops), FP32 and FP64."""
    m = model(dtype, vocab=13, block=8, emb=emb, hidden=5, seed=5)
    assert_rows_match(m, batch_for(m, 19, seed=6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_match_for_a_subset_of_parameters(dtype):
    """wrt in another order than the parameters, part of them: the columns follow wrt."""
    m = model(dtype)
    batch = batch_for(m, 9)
    wrt = [m.fc2.weight, m.embed.weight, m.fc1.bias]
    assert _core._rows_by_records(sample_program(m, batch[0], wrt=wrt))
    G = assert_rows_match(m, batch, wrt=wrt)
    assert G.shape == (9, m.fc2.weight.size + m.embed.weight.size + m.fc1.bias.size)


def test_zero_output_grads_leave_zero_rows():
    """A seedless loss (times zero): every record's output grads are zero, the sweep skips them,
    and their parts of the row are zeros, as in the one-sample replay."""
    m = model(bt.float64)
    batch = batch_for(m, 6)

    def loss(model, sample):
        return model.loss(*sample) * 0.0

    assert _core._rows_by_records(sample_program(m, batch[0], loss))
    G = assert_rows_match(m, batch, loss_fn=loss)
    assert not np.any(G)


@pytest.mark.parametrize("dtype", DTYPES)
def test_programs_that_do_not_qualify_keep_the_one_sample_replay(dtype):
    """A scalar op reading a parameter (a penalty), or two records reaching one parameter: the
    rows are replayed one sample at a time, with the same numbers either way."""
    m = model(dtype)
    batch = batch_for(m, 8)

    def penalty(model, sample):
        return model.loss(*sample) + model.fc2.bias[0] * model.fc2.bias[1]

    def twice(model, sample):
        return model.loss(*sample) + model.loss(*sample) * 0.5

    for loss in (penalty, twice):
        assert not _core._rows_by_records(sample_program(m, batch[0], loss))
        assert_rows_match(m, batch, loss_fn=loss)


def test_guards_fail_the_same_way():
    """A loss that branches on a value: the samples whose branch differs from the trace's are
    reported as failed with lanes on as with lanes off."""
    m = model(bt.float64)
    batch = batch_for(m, 12)

    def branchy(model, sample):
        logits = model.forward(sample[0])
        if logits[0] > 0:
            return _core.cross_entropy(logits, sample[1])
        return _core.cross_entropy(logits, sample[1]) * 2.0

    messages = []
    for on in (False, True):
        with pytest.raises(RuntimeError, match="guards failed") as err:
            per_sample(m, batch, on, loss_fn=branchy)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_rows_are_the_gradients_finite_differences():
    m = model(bt.float64, hidden=4)
    batch = batch_for(m, 3)
    G, L = per_sample(m, batch, True)
    pv = m.parameter_vector()
    theta = np.array(pv.tolist())
    rng = np.random.default_rng(4)
    h = 1e-6
    for s, (ctx, y) in enumerate(batch):
        assert L[s] == pytest.approx(m.loss(ctx, y).data, rel=1e-14)
        for j in rng.choice(theta.size, size=25, replace=False):
            up, down = theta.copy(), theta.copy()
            up[j] += h
            down[j] -= h
            pv.set_data(up.tolist())
            fu = m.loss(ctx, y).data
            pv.set_data(down.tolist())
            fd = m.loss(ctx, y).data
            pv.set_data(theta.tolist())
            assert G[s, j] == pytest.approx((fu - fd) / (2 * h), rel=1e-6, abs=1e-8)


def test_rows_match_torch_func():
    torch = pytest.importorskip("torch")
    from torch.func import grad, vmap

    m = model(bt.float64, hidden=6)
    batch = batch_for(m, 10)
    G, _ = per_sample(m, batch, True)
    state = m.state_dict()
    p = {k: torch.tensor(np.array(state[name].tolist()).reshape(shape)) for k, name, shape in (
        ("C", "embed.weight", (m.vocab, m.emb_dim)), ("W1", "fc1.weight", (m.hidden, m.block * m.emb_dim)),
        ("b1", "fc1.bias", (m.hidden,)), ("W2", "fc2.weight", (m.vocab, m.hidden)), ("b2", "fc2.bias", (m.vocab,)))}

    def loss(params, x, y):
        h = torch.tanh(params["C"][x].reshape(-1) @ params["W1"].T + params["b1"])
        logits = h @ params["W2"].T + params["b2"]
        return torch.nn.functional.cross_entropy(logits[None], y[None])

    X = torch.tensor([x for x, _ in batch])
    Y = torch.tensor([y for _, y in batch])
    g = vmap(grad(loss), in_dims=(None, 0, 0))(p, X, Y)
    T = np.concatenate([g[k].reshape(len(batch), -1).numpy() for k in ("C", "W1", "b1", "W2", "b2")], axis=1)
    np.testing.assert_allclose(G, T, rtol=1e-10, atol=1e-12)


def test_bad_input_raises_and_leaves_out_unchanged():
    m = model(bt.float32)
    batch = batch_for(m, 7)
    G, _ = per_sample(m, batch, True)
    out = np.full_like(G, 3.0)
    for bad in (np.zeros((7, G.shape[1]), np.float64), np.zeros((6, G.shape[1]), np.float32),
                np.zeros((7, G.shape[1] + 1), np.float32)):
        with pytest.raises(ValueError, match="out must be"):
            per_sample(m, batch, True, out=bad)
    broken = list(batch)
    broken[4] = ([0, 1, m.vocab], 2)  # an id past the table, in the middle of the batch
    with pytest.raises((IndexError, ValueError)):
        per_sample(m, broken, True, out=out)
    assert np.all(out == 3.0)
    G2, _ = per_sample(m, batch, True, out=out)  # and the program still replays afterwards
    assert np.array_equal(bits(G), bits(G2))
