"""lookup_linear: a lookup feeding a linear layer as one record, by the gathered rows below 1.5 V
rows and by per-position tables from 1.5 V rows on, optionally with its tanh inside. Both paths
against the records it replaces, finite differences and PyTorch; one and two threads, eager and
in replays; bad input."""
import random

import numpy as np
import pytest

import burtorch as bt
from burtorch import _core, nn
from cores import counts, needs_two
from finite_diff import central_difference
from lookup_models import TwoRecordMLP


def _operands(rng, V, d, P, out, rows, bias=True):
    table = bt.leaves([rng.uniform(-1, 1) for _ in range(V * d)], shape=(V, d))
    W = bt.leaves([rng.uniform(-1, 1) for _ in range(out * P * d)], shape=(out, P * d))
    b = bt.leaves([rng.uniform(-1, 1) for _ in range(out)]) if bias else None
    ids = [rng.randrange(V) for _ in range(rows * P)]
    return table, W, b, ids


def _loss(y, weights):
    """sum(y * weights): every output reaches the loss with its own weight."""
    return bt.dot(y.flatten(), weights)


def _grads(*vs):
    return [np.array(v.grad) for v in vs if v is not None]


# rows < 1.5 V: the gathered rows; rows >= 1.5 V: the tables
SHAPES = [dict(V=5, d=3, P=4, out=7, rows=7), dict(V=5, d=3, P=4, out=7, rows=8),
          dict(V=5, d=8, P=3, out=40, rows=23), dict(V=2, d=1, P=1, out=1, rows=4)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"rows{s['rows']}-V{s['V']}-out{s['out']}")
@pytest.mark.parametrize("bias", [True, False])
def test_equals_the_lookup_then_the_layer(shape, bias):
    """The same values and gradients as embedding + linear: to the bit through the gathered rows
    (the same kernels), to rounding through the tables (another order of the same sums)."""
    rng = random.Random(1)
    with bt.Arena(dtype=bt.float64):
        table, W, b, ids = _operands(rng, shape["V"], shape["d"], shape["P"], shape["out"], shape["rows"], bias)
        wts = [rng.uniform(-1, 1) for _ in range(shape["rows"] * shape["out"])]
        y = bt.lookup_linear(table, ids, W, b)
        assert y.shape == (shape["rows"], shape["out"])
        _loss(y, wts).backward()
        mine = [np.array(y.tolist())] + _grads(table, W, b)
        for v in (table, W, b):
            if v is not None:
                v.zero_grad()
        x = bt.embedding(table, ids).reshape(shape["rows"], shape["P"] * shape["d"])
        z = bt.linear(x, W, b)
        _loss(z, wts).backward()
        theirs = [np.array(z.tolist())] + _grads(table, W, b)
    by_tables = 2 * shape["rows"] >= 3 * shape["V"]
    for m, t in zip(mine, theirs):
        if by_tables:
            np.testing.assert_allclose(m, t, rtol=1e-12, atol=1e-12 * np.abs(t).max())
        else:
            np.testing.assert_array_equal(m, t)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"rows{s['rows']}-V{s['V']}-out{s['out']}")
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_tanh_inside_equals_the_layer_then_tanh(shape, bias, dtype):
    """activation="tanh": the bits of the layer's record followed by a tanh record, values and
    gradients, on both paths (float32 takes the vectorized tanh)."""
    rng = random.Random(11)
    results = []
    for fused in (True, False):
        with bt.Arena(dtype=dtype):
            table, W, b, ids = _operands(rng, shape["V"], shape["d"], shape["P"], shape["out"], shape["rows"], bias)
            wts = [random.Random(12).uniform(-1, 1) for _ in range(shape["rows"] * shape["out"])]
            if fused:
                y = bt.lookup_linear(table, ids, W, b, activation="tanh")
            else:
                y = bt.lookup_linear(table, ids, W, b).tanh()
            _loss(y, wts).backward()
            results.append([np.array(y.tolist())] + _grads(table, W, b))
        rng = random.Random(11)
    fused, apart = results
    assert np.abs(fused[0]).max() < 1, "the outputs are tanh's"
    for m, t in zip(fused, apart):
        np.testing.assert_array_equal(m, t)


@pytest.mark.parametrize("hidden", [96, 320])
@pytest.mark.parametrize("threads", [1, 2])
def test_tanh_inside_splits_as_the_tanh_record(hidden, threads):
    """The MLP's chunk through the tables with its tanh in the record, split by units across
    threads (each task's own block of the gradient, its part of the bias's): the bits of the
    same record followed by a tanh record, on the same threads, eager and compiled."""
    class TanhApart(nn.MakemoreMLP):
        def loss_batch(self, samples):
            ids = [i for ctx, _ in samples for i in ctx]
            h = _core.lookup_linear(self.embed.weight, ids, self.fc1.weight, self.fc1.bias).tanh()
            return _core.cross_entropy(self.fc2(h), [t for _, t in samples])

    bt.manual_seed(13)
    model = nn.MakemoreMLP(vocab=27, block=16, emb=16, hidden=hidden, dtype=bt.float32)
    apart = TanhApart(vocab=27, block=16, emb=16, hidden=hidden, dtype=bt.float32)
    apart.parameter_vector().set_data(model.parameter_vector().numpy())
    r = random.Random(14)
    batch = [([r.randrange(27) for _ in range(16)], r.randrange(27)) for _ in range(64)]
    want = _mlp_grads(apart, batch, threads)
    assert np.abs(want).max() > 0
    np.testing.assert_array_equal(_mlp_grads(model, batch, threads), want)
    np.testing.assert_array_equal(_mlp_grads(model, batch, threads, compile=True), want)


@pytest.mark.parametrize("rows", [3, 12])
@pytest.mark.parametrize("activation", [None, "tanh"])
def test_gradients_against_finite_differences(rows, activation):
    rng = random.Random(2)
    with bt.Arena(dtype=bt.float64):
        table, W, b, ids = _operands(rng, 4, 3, 2, 5, rows)
        wts = [rng.uniform(-1, 1) for _ in range(rows * 5)]
        f = lambda: _loss(bt.lookup_linear(table, ids, W, b, activation=activation), wts)  # noqa: E731
        f().backward()
        for v in (table, W, b):
            g = v.grad
            for i in range(len(g)):
                fd = central_difference(v.flatten()[i], f, 1e-6)
                assert g[i] == pytest.approx(fd, rel=1e-7, abs=1e-8), (v, i)


@pytest.mark.parametrize("rows", [3, 30])
@pytest.mark.parametrize("inside", [False, True])
def test_against_pytorch(rows, inside):
    torch = pytest.importorskip("torch")
    rng = random.Random(3)
    V, d, P, out = 6, 4, 3, 9
    with bt.Arena(dtype=bt.float64):
        table, W, b, ids = _operands(rng, V, d, P, out, rows)
        t = [rng.randrange(out) for _ in range(rows)]
        if inside:
            h = bt.lookup_linear(table, ids, W, b, activation="tanh")
        else:
            h = bt.lookup_linear(table, ids, W, b).tanh()
        loss = bt.cross_entropy(h, t)
        loss.backward()
        f64 = dict(dtype=torch.float64, requires_grad=True)
        tt, tW, tb = (torch.tensor(v.tolist(), **f64) for v in (table, W, b))
        x = tt.view(V, d)[torch.tensor(ids)].reshape(rows, P * d)
        tl = torch.nn.functional.cross_entropy(torch.tanh(x @ tW.view(out, P * d).T + tb), torch.tensor(t))
        tl.backward()
        assert loss.data == pytest.approx(tl.item(), rel=1e-12)
        for mine, theirs in ((table, tt), (W, tW), (b, tb)):
            np.testing.assert_allclose(mine.grad, theirs.grad.numpy(), rtol=1e-10, atol=1e-13)


def _mlp_grads(model, batch, threads, **kw):
    bt.grad_oracle(model, batch, chunk=len(batch), threads=threads, **kw)
    return model.parameter_vector().numpy("grads").copy()


def _table_slice(model):
    """Where the embedding table's gradient sits in model.parameter_vector(): first, as it was
    registered first."""
    n = model.embed.weight.size
    assert np.array_equal(model.parameter_vector().numpy()[:n], model.embed.weight.numpy().ravel())
    return slice(0, n)


@pytest.mark.parametrize("hidden", [96, 320])  # 320: from 256 units, more tasks than threads
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@needs_two
def test_one_and_two_threads_and_replays(dtype, hidden):
    """Through the tables (64 rows of 27 ids), forward and sweep split by blocks of output units:
    eager and compiled give the same bits on each thread count, and so does every run; one and two
    threads give the same bits but for the table's gradient (a sum over units, added up in one part
    a task), which agrees to rounding; the two records it replaces agree to rounding."""
    bt.manual_seed(3)
    model = nn.MakemoreMLP(vocab=27, block=16, emb=16, hidden=hidden, dtype=dtype)
    r = random.Random(4)
    batch = [([r.randrange(27) for _ in range(16)], r.randrange(27)) for _ in range(64)]
    tol = 1e-5 if dtype == bt.float32 else 1e-12
    one = _mlp_grads(model, batch, 1)
    np.testing.assert_array_equal(_mlp_grads(model, batch, 1, compile=True), one)
    two = _mlp_grads(model, batch, 2)
    for _ in range(3):
        np.testing.assert_array_equal(_mlp_grads(model, batch, 2), two)
        np.testing.assert_array_equal(_mlp_grads(model, batch, 2, compile=True), two)
    table = _table_slice(model)
    rest = np.ones(one.size, bool)
    rest[table] = False
    np.testing.assert_array_equal(two[rest], one[rest])
    np.testing.assert_allclose(two[table], one[table], rtol=0, atol=tol * np.abs(one[table]).max())
    assert not np.array_equal(two[table], one[table]), "two tasks add the table's gradient in two parts"
    apart = TwoRecordMLP(vocab=27, block=16, emb=16, hidden=hidden, dtype=dtype)
    apart.parameter_vector().set_data(model.parameter_vector().numpy())
    two_records = _mlp_grads(apart, batch, 1)
    np.testing.assert_allclose(two_records, one, rtol=0, atol=tol * np.abs(one).max())
    assert not np.array_equal(two_records, one), "64 rows of 27 ids go through the tables, another order"


@pytest.mark.parametrize("hidden", [64, 320])
def test_fused_sgd_steps_through_the_tables_as_the_unfused_step(hidden):
    """fused_step steps fc1's W inside the record, after the table's gradient read the old W:
    the bits of grad_oracle + step on the same number of threads, eager and compiled."""
    from burtorch.optim import SGD

    bt.manual_seed(5)
    r = random.Random(6)
    batch = [([r.randrange(27) for _ in range(16)], r.randrange(27)) for _ in range(64)]
    first = nn.MakemoreMLP(vocab=27, block=16, emb=16, hidden=hidden, dtype=bt.float32)
    start = first.parameter_vector().numpy().copy()  # numpy: a tenth of the time of Python lists
    for threads in counts(1, 2):
        ref_model = nn.MakemoreMLP(vocab=27, block=16, emb=16, hidden=hidden, dtype=bt.float32)
        ref_model.parameter_vector().set_data(start)
        ref = SGD(ref_model.parameters(), lr=0.3, weight_decay=0.01)
        bt.grad_oracle(ref_model, batch, chunk=64, threads=threads)
        ref.step()
        want = ref_model.parameter_vector().numpy().copy()
        for compile_ in (False, True):
            m = nn.MakemoreMLP(vocab=27, block=16, emb=16, hidden=hidden, dtype=bt.float32)
            m.parameter_vector().set_data(start)
            opt = SGD(m.parameters(), lr=0.3, weight_decay=0.01)
            opt.fused_step(m, batch, chunk=64, threads=threads, compile=compile_)
            assert opt.fused_weights == 2
            np.testing.assert_array_equal(m.parameter_vector().numpy(), want, err_msg=f"{threads} {compile_}")


def test_compiled_chunks_through_the_tables_equal_eager_chunks():
    """Chunks of 12 rows over a 5-id vocabulary take the tables, a last chunk of 4 the gathered
    rows; the replay reads each chunk's ids as its inputs and gives the eager chunks' bits."""
    bt.manual_seed(7)
    model = nn.MakemoreMLP(vocab=5, block=3, emb=4, hidden=9, dtype=bt.float64)
    r = random.Random(8)
    batch = [([r.randrange(5) for _ in range(3)], r.randrange(5)) for _ in range(28)]
    pv = model.parameter_vector()
    loss = bt.grad_oracle(model, batch, chunk=12)
    eager = pv.numpy("grads").copy()
    assert bt.grad_oracle(model, batch, chunk=12, compile=True, threads=1) == loss
    np.testing.assert_array_equal(pv.numpy("grads"), eager)
    other = [([r.randrange(5) for _ in range(3)], r.randrange(5)) for _ in range(28)]
    loss = bt.grad_oracle(model, other, chunk=12)
    eager = pv.numpy("grads").copy()
    assert bt.grad_oracle(model, other, chunk=12, compile=True, threads=1) == loss
    np.testing.assert_array_equal(pv.numpy("grads"), eager)


class _Doubled(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2.0


class _Halved(nn.Embedding):
    def forward(self, ids):
        return super().forward(ids) * 0.5


@pytest.mark.parametrize("layer", ["embed", "fc1", "fc1 instance"])
def test_a_layer_with_its_own_forward_is_called_in_the_chunked_loss(layer):
    """loss_batch runs a subclass's forward of embed or fc1 (or one set on the module) over the
    chunk's rows, as forward runs it per sample (lookup_linear would skip it): the chunk's loss
    and grads are the samples'."""
    bt.manual_seed(9)
    model = nn.MakemoreMLP(vocab=5, block=3, emb=4, hidden=6, dtype=bt.float64)
    if layer == "fc1":
        model.fc1 = _Doubled(12, 6, dtype=bt.float64)
    elif layer == "embed":
        model.embed = _Halved(5, 4, dtype=bt.float64)
    else:
        plain = model.fc1.forward
        model.fc1.forward = lambda x: plain(x) * 2.0
    r = random.Random(10)
    batch = [([r.randrange(5) for _ in range(3)], r.randrange(5)) for _ in range(12)]
    pv = model.parameter_vector()
    per_sample = bt.grad_oracle(model, batch, chunk=1)
    want = pv.numpy("grads").copy()
    assert bt.grad_oracle(model, batch, chunk=12) == pytest.approx(per_sample, rel=1e-13)
    np.testing.assert_allclose(pv.numpy("grads"), want, rtol=0, atol=1e-14)


def test_bad_input_is_a_clear_error():
    rng = random.Random(9)
    with bt.Arena(dtype=bt.float64):
        table, W, b, ids = _operands(rng, 5, 3, 2, 4, 3)
        with pytest.raises(IndexError):
            bt.lookup_linear(table, ids[:-1] + [5], W, b)
        with pytest.raises(IndexError):
            bt.lookup_linear(table, ids[:-1] + [-1], W, b)
        with pytest.raises(ValueError, match="whole rows"):
            bt.lookup_linear(table, ids[:-1], W, b)
        with pytest.raises(ValueError, match="whole rows"):
            bt.lookup_linear(table, [], W, b)
        with pytest.raises(ValueError, match="whole number"):
            bt.lookup_linear(table, ids, bt.leaves([0.0] * 20, shape=(4, 5)), b)
        with pytest.raises(ValueError, match="bias"):
            bt.lookup_linear(table, ids, W, bt.leaves([0.0] * 3))
        with pytest.raises(ValueError, match="table"):
            bt.lookup_linear(table.flatten(), ids, W, b)
        with pytest.raises(ValueError, match="W must"):
            bt.lookup_linear(table, ids, W.columns(0, 3), b)
        with pytest.raises(TypeError):
            bt.lookup_linear(table, [1.5] * 6, W, b)
        with pytest.raises(ValueError, match="activation must be None or 'tanh', got 'relu'"):
            bt.lookup_linear(table, ids, W, b, activation="relu")
        with pytest.raises(ValueError, match="activation"):
            bt.lookup_linear(table, ids, W, b, activation="\udc80")  # no UTF-8 form
        with pytest.raises(TypeError, match="activation must be None or 'tanh', got int"):
            bt.lookup_linear(table, ids, W, b, activation=1)
        W32 = bt.leaves([0.0] * 24, shape=(4, 6), arena=bt.Arena(dtype=bt.float32))
        with pytest.raises(TypeError, match="float64 and float32"):
            bt.lookup_linear(table, ids, W32, b)
        with pytest.raises(ValueError, match="arena"):
            bt.lookup_linear(table, ids, bt.leaves([0.0] * 24, shape=(4, 6), arena=bt.Arena()), b)
        cp = bt.current_arena().checkpoint()
        late = bt.leaves([0.0] * 4)
        bt.current_arena().rewind(cp)
        with pytest.raises(_core.StaleValueError):
            bt.lookup_linear(table, ids, W, late)
        y = bt.lookup_linear(table, ids, W, b)  # nothing above broke the arena
        assert len(y.tolist()) == 12
