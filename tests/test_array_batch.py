"""ArrayBatch: a batch held as integer arrays, one per id part.

Every path that takes a batch must give the same bits for an ArrayBatch as for the list of its
samples (the compiled ones read the arrays natively, the rest see the samples), and refuse bad
arrays with a clear error before anything changes.
"""
import numpy as np
import pytest

import burtorch as bt
from burtorch import nn
from burtorch.data import ArrayBatch
from burtorch.optim import SGD
from burtorch.oracle import grad_oracle


def _mlp_batch(rng, b, block=16, vocab=27):
    return [([rng.randrange(vocab) for _ in range(block)], rng.randrange(vocab)) for _ in range(b)]


def _gpt_batch(rng, b, block=8, vocab=65):
    return [([rng.randrange(vocab) for _ in range(block)], [rng.randrange(vocab) for _ in range(block)])
            for _ in range(b)]


def _mlp(dtype):
    bt.manual_seed(3)
    return nn.MakemoreMLP(vocab=27, block=16, emb=8, hidden=32, dtype=dtype)


def _gpt():
    bt.manual_seed(3)
    return nn.MiniGPT(vocab=65, block=8, dim=12, layers=2, heads=3, dtype=bt.float64)


def _values(model):
    return np.array(model.parameter_vector().tolist())


def _grads(model):
    return np.array(model.parameter_vector().tolist("grads"))


def test_an_array_batch_is_the_sequence_of_its_samples(rng):
    samples = _mlp_batch(rng, 6)
    ab = ArrayBatch.from_samples(samples)
    assert len(ab) == 6 and ab.shape == (16, 0)
    assert list(ab) == [(list(c), t) for c, t in samples]
    assert ab[-1] == (list(samples[-1][0]), samples[-1][1])
    assert isinstance(ab[1], tuple) and type(ab[1][1]) is int
    assert list(ab[2:4]) == list(ab)[2:4] and isinstance(ab[2:4], ArrayBatch)
    picked = ab[np.array([5, 0, 5])]
    assert isinstance(picked, ArrayBatch) and list(picked) == [ab[5], ab[0], ab[5]]
    with pytest.raises(IndexError):
        ab[6]
    # any integer dtype; a strided or byte-swapped view is copied into native C order
    X, Y = ab.parts
    for x in (X.astype(np.uint8), X.astype(">i4"), np.asfortranarray(X), X[:, ::-1][:, ::-1]):
        other = ArrayBatch(x, Y)
        assert other.parts[0].flags.c_contiguous and other.parts[0].dtype.isnative
        assert list(other) == list(ab)


@pytest.mark.parametrize(("parts", "error", "match"), [
    ((), ValueError, "at least one id part"),
    ((np.zeros((4, 16)), np.zeros(4, dtype=int)), TypeError, "must hold integers"),
    ((np.zeros((4, 16, 1), dtype=int), np.zeros(4, dtype=int)), ValueError, "1-D .* or 2-D"),
    ((np.zeros((4, 0), dtype=int), np.zeros(4, dtype=int)), ValueError, "1-D .* or 2-D"),
    ((np.zeros((4, 16), dtype=int), np.zeros(3, dtype=int)), ValueError, "one row per sample"),
    ((np.zeros((4, 16), dtype=int), ["a", "b", "c", "d"]), TypeError, "must hold integers"),
])
def test_bad_arrays_are_refused(parts, error, match):
    with pytest.raises(error, match=match):
        ArrayBatch(*parts)


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_fused_steps_take_the_same_steps_from_arrays(dtype, threads, rng):
    batches = [_mlp_batch(rng, 8) for _ in range(3)]
    a, b = _mlp(dtype), _mlp(dtype)
    oa, ob = SGD(a.parameters(), lr=0.2, weight_decay=0.01), SGD(b.parameters(), lr=0.2, weight_decay=0.01)
    for batch in batches:
        la = oa.fused_step(a, batch, chunk=8, threads=threads, compile=True)
        lb = ob.fused_step(b, ArrayBatch.from_samples(batch), chunk=8, threads=threads, compile=True)
        assert la == lb
    assert ob.fused_weights == oa.fused_weights == 2
    assert np.array_equal(_values(a), _values(b))


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize(("chunk", "threads"), [(1, 1), (1, 2), (4, 1), (4, 2), (3, 2)])
def test_the_oracle_gives_the_same_gradient_from_arrays(compile, chunk, threads, rng):
    batch = _mlp_batch(rng, 8)
    a, b = _mlp(bt.float64), _mlp(bt.float64)
    la = grad_oracle(a, batch, chunk=chunk, threads=threads, compile=compile)
    lb = grad_oracle(b, ArrayBatch.from_samples(batch), chunk=chunk, threads=threads, compile=compile)
    assert la == lb
    assert np.array_equal(_grads(a), _grads(b)) and np.any(_grads(b) != 0)


def test_the_gpt_steps_alike_from_arrays(rng):
    batch = _gpt_batch(rng, 4)
    a, b = _gpt(), _gpt()
    oa, ob = SGD(a.parameters(), lr=0.1), SGD(b.parameters(), lr=0.1)
    for _ in range(2):
        assert oa.fused_step(a, batch, chunk=4, compile=True) == ob.fused_step(
            b, ArrayBatch.from_samples(batch), chunk=4, compile=True)
    assert np.array_equal(_values(a), _values(b))
    ga, la = bt.per_sample_grads(a, batch)
    gb, lb = bt.per_sample_grads(a, ArrayBatch.from_samples(batch))
    assert np.array_equal(ga, gb) and np.array_equal(la, lb)


def test_a_step_reads_the_arrays_when_it_runs(rng):
    """Arrays filled anew between steps are the new batch (nothing is cached from them)."""
    first, second = _mlp_batch(rng, 8), _mlp_batch(rng, 8)
    a, b = _mlp(bt.float32), _mlp(bt.float32)
    oa, ob = SGD(a.parameters(), lr=0.2), SGD(b.parameters(), lr=0.2)
    ab = ArrayBatch.from_samples(first)
    X, Y = ab.parts
    for batch in (first, second):
        new = ArrayBatch.from_samples(batch)
        X[...], Y[...] = new.parts
        assert oa.fused_step(a, batch, chunk=8, compile=True) == ob.fused_step(b, ab, chunk=8, compile=True)
    assert np.array_equal(_values(a), _values(b))


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("bad", [27, -1, 2**63 + 5])
def test_an_id_out_of_range_raises_and_changes_nothing(compile, bad, rng):
    batch = _mlp_batch(rng, 8)
    m = _mlp(bt.float32)
    opt = SGD(m.parameters(), lr=0.2)
    opt.fused_step(m, ArrayBatch.from_samples(batch), chunk=8, compile=compile)  # traced on good ids
    X, Y = ArrayBatch.from_samples(batch).parts
    X = X.astype(np.uint64) if bad > 2**62 else X
    X[5, 3] = bad
    before = _values(m)
    # the replay names the sample and the id's position among its chunk's (16 per sample, then
    # the targets); the eager path raises from the embedding
    with pytest.raises(IndexError, match=r"sample 5: id .* at position 83 " if compile else None):
        opt.fused_step(m, ArrayBatch(X, Y), chunk=8, compile=compile)
    assert np.array_equal(_values(m), before)
    if compile:  # a target: the second part's block
        X, Y = ArrayBatch.from_samples(batch).parts
        Y[6] = 27
        with pytest.raises(IndexError, match=r"sample 6: id 27 at position 134 "):
            opt.fused_step(m, ArrayBatch(X, Y), chunk=8, compile=compile)
        assert np.array_equal(_values(m), before)


def test_a_context_of_another_length_is_refused(rng):
    m = _mlp(bt.float32)
    opt = SGD(m.parameters(), lr=0.2)
    short = ArrayBatch(np.zeros((8, 15), dtype=np.int64), np.zeros(8, dtype=np.int64))
    before = _values(m)
    with pytest.raises(ValueError, match="context"):
        opt.fused_step(m, short, chunk=8, compile=True)
    assert np.array_equal(_values(m), before)


def test_the_native_reader_checks_what_it_is_handed(rng):
    """The replays validate the arrays themselves, not only ArrayBatch's constructor."""
    m = _mlp(bt.float64)
    batch = _mlp_batch(rng, 4)
    grad_oracle(m, batch, chunk=4, compile=True)
    from burtorch import oracle_compiled as oc

    prog = oc._cached_program(m, oc._uniform_chunk_key(4, (16, 0)))
    X, Y = ArrayBatch.from_samples(batch).parts
    with pytest.raises(TypeError, match="integers"):
        prog._replay_chunks((X.astype(np.float64), Y), 0, 4, 1, [16, 0], 1.0)
    with pytest.raises(ValueError, match="shape"):
        prog._replay_chunks((X[:, :8].copy(), Y), 0, 4, 1, [16, 0], 1.0)
    with pytest.raises(ValueError, match="one row per sample"):
        prog._replay_chunks((X, Y[:3].copy()), 0, 4, 1, [16, 0], 1.0)
    with pytest.raises(ValueError, match="one array per id part"):
        prog._replay_chunks((X,), 0, 4, 1, [16, 0], 1.0)
    with pytest.raises(TypeError, match="C-contiguous"):
        prog._replay_chunks((np.asfortranarray(X), Y), 0, 4, 1, [16, 0], 1.0)
    with pytest.raises(IndexError):
        prog._replay_chunks((X, Y), 0, 4, 2, [16, 0], 1.0)  # two chunks of four from four samples
