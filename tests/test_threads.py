"""Threads: the thread count's checks, range records split across threads (the same bits as one
thread), and the threaded gradient oracles on both models (chunked eager: bitwise; compiled:
within 1e-12 / 1e-5 of one thread and bitwise run to run), plus a stress loop of short runs."""
from __future__ import annotations

import random

import numpy as np
import pytest

import burtorch as bt
from burtorch import nn
from lookup_models import TwoRecordMLP

CORES = bt._core._allowed_cores()
needs_two = pytest.mark.skipif(CORES < 2, reason="this process may use one core only")


@pytest.fixture(autouse=True)
def _restore_threads():
    before = bt.get_num_threads()
    yield
    bt.set_num_threads(before)


def test_default_is_the_allowed_cores_and_set_get_round_trip():
    assert 1 <= bt.get_num_threads() <= CORES
    bt.set_num_threads(1)
    assert bt.get_num_threads() == 1
    bt.set_num_threads(CORES)
    assert bt.get_num_threads() == CORES


@pytest.mark.parametrize("bad", [0, -1, CORES + 1, 10**30])
def test_bad_thread_counts_are_value_errors(bad):
    with pytest.raises(ValueError, match="this process may use"):
        bt.set_num_threads(bad)


@pytest.mark.parametrize("bad", ["2", 2.0, True, None])
def test_non_int_thread_counts_are_type_errors(bad):
    with pytest.raises(TypeError):
        bt.set_num_threads(bad)


def _mlp(dtype, hidden=96):
    bt.manual_seed(11)
    model = nn.MakemoreMLP(vocab=27, block=8, emb=16, hidden=hidden, dtype=dtype)
    r = random.Random(12)
    batch = [([r.randrange(27) for _ in range(8)], r.randrange(27)) for _ in range(40)]
    return model, batch


def _gpt(dtype):
    bt.manual_seed(13)
    model = nn.MiniGPT(vocab=20, block=8, dim=24, layers=2, heads=6, dtype=dtype)
    r = random.Random(14)
    batch = [([r.randrange(20) for _ in range(8)], [r.randrange(20) for _ in range(8)]) for _ in range(40)]
    return model, batch


def _oracle(model, batch, **kw):
    loss = bt.grad_oracle(model, batch, **kw)
    return loss, model.parameter_vector().numpy("grads").copy()


@pytest.mark.parametrize("bad", [0, -2, CORES + 1])
def test_oracle_refuses_bad_thread_counts(bad):
    model, batch = _mlp(bt.float64)
    for kw in ({}, {"chunk": 8}, {"compile": True}):
        with pytest.raises(ValueError, match="threads must be in"):
            bt.grad_oracle(model, batch, threads=bad, **kw)
    with pytest.raises(TypeError):
        bt.grad_oracle(model, batch, threads=1.0)


class _CountingMLP(nn.MakemoreMLP):
    """Records the thread count native ops see while its chunk program is traced."""

    seen: list[int] = []

    def loss_batch(self, samples):
        self.seen.append(bt.get_num_threads())
        return super().loss_batch(samples)


@needs_two
@pytest.mark.parametrize("compile", [False, True])
def test_the_oracle_thread_count_caps_every_op_of_its_call(compile):
    """grad_oracle(threads=1) under a process-wide count of 2 runs its ops on one thread, compiled
    or not (a range op inside a replay included), and restores the count after."""
    batch = [([1, 2, 3, 4], 5)] * 4
    bt.set_num_threads(2)
    for threads in (1, 2):
        bt.manual_seed(15)
        model = _CountingMLP(vocab=11, block=4, emb=5, hidden=7, dtype=bt.float32)  # traced anew
        model.seen = []
        bt.grad_oracle(model, batch, chunk=2, compile=compile, threads=threads)
        assert model.seen and set(model.seen) == {threads}
        assert bt.get_num_threads() == 2


@needs_two
@pytest.mark.parametrize("threads", [1, 2])
def test_the_trainer_steps_on_the_oracles_thread_count(threads):
    """burtorch train --threads N: the optimizer step runs under the oracle's count too (not the
    process's, every core by default), and the process's count is as it was after the run."""
    from burtorch import data
    from burtorch.cli.trainer import train
    from burtorch.optim import SGD

    class CountingSGD(SGD):
        seen: list = []

        def step(self):
            self.seen.append(bt.get_num_threads())
            super().step()

    words = ["anna", "bob", "carla", "dave", "emma", "fred"] * 4
    train_set = data.WordDataset(words, 3)
    model = nn.MakemoreMLP(vocab=train_set.vocab_size, block=3, emb=4, hidden=8, dtype=bt.float32)
    opt = CountingSGD(model.parameters(), lr=0.1)
    bt.set_num_threads(2 if threads == 1 else 1)
    train(model, opt, train_set, train_set.batch(8, random.Random(0)), steps=3, batch=4, eval_every=10,
          rng=random.Random(1), chunk=2, threads=threads)
    assert opt.seen == [threads] * 3
    assert bt.get_num_threads() == (2 if threads == 1 else 1)


@needs_two
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
# Weight decay is a branch of plain SGD's step only (csrc/optim.hpp's sgd_step, its wd == 0
# template); momentum's and Adam's (L2) steps multiply by it in the same loop either way, so a
# non-zero one covers their path.
@pytest.mark.parametrize("opt,wd", [("sgd", 0.0), ("sgd", 0.01), ("momentum", 0.01), ("adam", 0.01)])
def test_a_step_split_across_threads_has_the_bits_of_one_thread(dtype, opt, wd):
    """A step large enough to split across threads, after work that ran on both (as a threaded
    oracle), writes its new values with streaming stores; they are the one-thread step's,
    whatever the vector's alignment, up to its ragged end, and so are the optimizer's buffers."""
    from burtorch.optim import SGD, Adam

    make = {"sgd": lambda v: SGD([v], lr=0.1, weight_decay=wd),
            "momentum": lambda v: SGD([v], lr=0.1, momentum=0.9, weight_decay=wd),
            "adam": lambda v: Adam([v], lr=0.01, weight_decay=wd)}[opt]
    gen = np.random.default_rng(3)
    # A step splits from kBlockElements = 1 << 16 elements after threaded work (csrc/threads.hpp,
    # bindings/optim.cpp's StepSplit): just above it, not a multiple of any vector width.
    n = 65536 + 37
    w, g = gen.standard_normal(n), gen.standard_normal(n)
    # A unary map splits from 8,192 elements (4 units each against kParallelItemWork = 1 << 15,
    # csrc/range/map.hpp): twice that marks the work since the last step as threaded.
    threaded_work = np.full(16_384, 0.5)
    for pad in (1, 5, 16):  # values before the vector's: its start moves across a cache line
        stepped = []
        for threads in (1, 2):
            bt.set_num_threads(threads)
            bt.leaves([0.0] * pad, dtype=dtype)
            v = bt.leaves(w, dtype=dtype)
            v.set_grad(g)
            o = make(v)
            for _ in range(2):  # the second step reads the buffers the first one wrote
                bt.leaves(threaded_work, dtype=dtype).tanh()
                o.step()
            stepped.append((v.numpy().copy(), np.fromiter(o.state.state(), np.float64)))
        assert not np.array_equal(stepped[1][0], w.astype(stepped[1][0].dtype))
        np.testing.assert_array_equal(stepped[0][0], stepped[1][0])
        np.testing.assert_array_equal(stepped[0][1], stepped[1][1])


@needs_two
@pytest.mark.parametrize("make", [_mlp, _gpt])
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_chunked_eager_is_bitwise_the_same_on_two_threads(make, dtype):
    model, batch = make(dtype)
    loss1, g1 = _oracle(model, batch, chunk=40, threads=1)
    loss2, g2 = _oracle(model, batch, chunk=40, threads=2)
    assert loss1 == loss2
    np.testing.assert_array_equal(g1, g2)


@needs_two
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_large_gathers_and_slot_fills_split_with_the_same_bits(dtype):
    """A chunk of 40 samples of 16 ids embedded 64 wide: the layer gathers 40,960 values from 640
    spans and adds its input gradient back into the table's rows (which the ids repeat), and its
    records add tens of thousands of slots at once (all three split across threads above
    32,768); the fused step writes the same weights as on one thread, and so does the compiled
    fused step, whose program looks the ids up as one gather record (split by output rows)."""
    def run(threads):
        bt.manual_seed(21)
        model = nn.MakemoreMLP(vocab=27, block=16, emb=64, hidden=40, dtype=dtype)
        r = random.Random(22)
        batch = [([r.randrange(27) for _ in range(16)], r.randrange(27)) for _ in range(40)]
        loss, grads = _oracle(model, batch, chunk=40, threads=threads)
        opt = bt.optim.SGD(model.parameters(), lr=0.1)
        opt.fused_step(model, batch, chunk=40, threads=threads)
        eager = model.parameter_vector().numpy().copy()
        for _ in range(2):  # the first also traces the program; the second starts from what it wrote
            opt.fused_step(model, batch, chunk=40, threads=threads, compile=True)
        return loss, grads, eager, model.parameter_vector().numpy().copy()

    one, two = run(1), run(2)
    assert one[0] == two[0]
    for a, b in zip(one[1:], two[1:]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(one[2], one[3])


@needs_two
@pytest.mark.parametrize("make", [_mlp, _gpt])
@pytest.mark.parametrize("dtype,rel", [(bt.float32, 1e-5), (bt.float64, 1e-12)])
def test_compiled_oracle_on_two_threads_matches_one_and_repeats_bitwise(make, dtype, rel):
    model, batch = make(dtype)
    loss1, g1 = _oracle(model, batch, compile=True, threads=1)
    eager_loss, eager = _oracle(model, batch)  # one thread is the eager order, bitwise
    assert loss1 == eager_loss
    np.testing.assert_array_equal(g1, eager)
    loss2, g2 = _oracle(model, batch, compile=True, threads=2)
    assert loss2 == pytest.approx(loss1, rel=rel)
    assert np.abs(g2 - g1).max() <= rel * np.abs(g1).max()
    for _ in range(3):
        again_loss, again = _oracle(model, batch, compile=True, threads=2)
        assert again_loss == loss2
        np.testing.assert_array_equal(again, g2)


@needs_two
def test_compiled_two_threads_with_zero_grad_false_adds_to_existing_grads():
    model, batch = _mlp(bt.float64)
    _, g = _oracle(model, batch, compile=True, threads=2)
    _, twice = _oracle(model, batch, compile=True, threads=2, zero_grad=False)
    np.testing.assert_allclose(twice, 2 * g, rtol=1e-12, atol=0)


@needs_two
@pytest.mark.parametrize("chunk", [1, 2])
def test_compiled_two_threads_reports_a_non_finite_loss_and_adds_nothing(chunk):
    model, batch = _mlp(bt.float64)
    pv = model.parameter_vector()
    bt.grad_oracle(model, batch, compile=True, threads=2, chunk=chunk)  # traced
    before = pv.numpy("grads").copy()
    assert np.abs(before).max() > 0
    bias = model.fc2.bias.tolist()
    bias[3] = float("inf")
    model.fc2.bias.set_data(bias)
    with pytest.raises(FloatingPointError, match="sample"):
        bt.grad_oracle(model, batch, compile=True, threads=2, chunk=chunk, zero_grad=False)
    np.testing.assert_array_equal(pv.numpy("grads"), before)
    with pytest.raises(FloatingPointError, match="sample"):  # zero_grad: put back as they were (issue 41)
        bt.grad_oracle(model, batch, compile=True, threads=2, chunk=chunk)
    np.testing.assert_array_equal(pv.numpy("grads"), before)


@needs_two
def test_compiled_two_threads_recomputes_samples_whose_guards_fail():
    bt.manual_seed(21)
    model, batch = _mlp(bt.float64)

    def loss_fn(m, sample):
        loss = m.loss(*sample)
        return loss * 2.0 if loss > 3.3 else loss  # a guard: the branch depends on the sample

    one = bt.grad_oracle(model, batch, loss_fn=loss_fn, threads=1)
    g_one = model.parameter_vector().numpy("grads").copy()
    two = bt.grad_oracle(model, batch, loss_fn=loss_fn, compile=True, threads=2)
    g_two = model.parameter_vector().numpy("grads")
    assert two == pytest.approx(one, rel=1e-12)
    assert np.abs(g_two - g_one).max() <= 1e-12 * np.abs(g_one).max()


@needs_two
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_each_split_range_op_gives_the_same_bits_on_two_threads(dtype):
    """Every op that splits, at sizes above its threshold, values and every grad."""
    npd = np.float32 if dtype == bt.float32 else np.float64
    rng = np.random.default_rng(5)

    def run(threads):
        bt.set_num_threads(threads)
        arena = bt.Arena(dtype, 1 << 22)
        with arena:
            X = bt.leaves(rng_x.astype(npd), shape=(256, 96), dtype=dtype)
            W = bt.leaves(rng_w.astype(npd), shape=(144, 96), dtype=dtype)
            b = bt.leaves(rng_b.astype(npd), shape=(144,), dtype=dtype)
            g = bt.leaves(np.linspace(0.5, 1.5, 48).astype(npd), shape=(48,), dtype=dtype)
            beta = bt.leaves(np.linspace(-0.2, 0.2, 48).astype(npd), shape=(48,), dtype=dtype)
            h = bt.linear(X, W, b).tanh()                                 # linear, unary map
            y = bt.multi_head_attention(h, 6, True, sequences=32)        # 32 sequences of 8
            z = bt.layer_norm(y.reshape(256, 48), g, beta)
            s = bt.softmax(z)
            loss = bt.cross_entropy(z, [i % 48 for i in range(256)]) + bt.vsum(s * s)
            loss.backward()
            return [loss.data] + [v.numpy("grads").copy() for v in (X, W, b, g, beta)] + \
                [np.array(t.tolist()) for t in (h, y, z, s)]

    rng_x, rng_w, rng_b = rng.uniform(-1, 1, (256, 96)), rng.uniform(-0.3, 0.3, (144, 96)), rng.uniform(-1, 1, 144)
    one, two = run(1), run(2)
    assert one[0] == two[0]
    for a, c in zip(one[1:], two[1:]):
        np.testing.assert_array_equal(a, c)


def _widened(vector):
    """The vector's values widened to float64, exactly as tolist gives them, at a tenth of its
    cost: the stress loops below read them once an iteration."""
    return vector.numpy().astype(np.float64)


@needs_two
def test_stress_many_short_threaded_runs_agree_bitwise():
    """Many short runs through both threaded paths: a lost or doubled task would show."""
    model, batch = _gpt(bt.float32)
    small = batch[:6]
    _, ref_c = _oracle(model, small, compile=True, threads=2)
    _, ref_e = _oracle(model, small, chunk=6, threads=2)
    for i in range(150):
        if i % 2:
            _, g = _oracle(model, small, compile=True, threads=2)
            np.testing.assert_array_equal(g, ref_c)
        else:
            _, g = _oracle(model, small, chunk=6, threads=2)
            np.testing.assert_array_equal(g, ref_e)


@needs_two
def test_stress_many_short_fused_steps_run_with_their_lookup_agree_bitwise():
    """Short two-thread compiled fused steps whose lookup runs with its layer (each thread its own
    rows and partial table gradient), from the same parameters each time: a lost, doubled or
    racing task would show in the bits."""
    from burtorch.optim import SGD

    bt.manual_seed(4)
    model = TwoRecordMLP(vocab=27, block=16, emb=16, hidden=64, dtype=bt.float32)
    r = random.Random(8)
    batch = [([r.randrange(27) for _ in range(16)], r.randrange(27)) for _ in range(16)]
    pv = model.parameter_vector()
    start = pv.numpy().copy()
    opt = SGD(model.parameters(), lr=0.5)
    ref = None
    for _ in range(80):
        pv.set_data(start)
        opt.fused_step(model, batch, chunk=16, threads=2, compile=True)
        after = _widened(pv)
        if ref is None:
            ref = after
        np.testing.assert_array_equal(after, ref)
    pv.set_data(start)
    opt.fused_step(model, batch, chunk=16, threads=1, compile=True)
    one = _widened(pv)
    assert not np.array_equal(one, ref), "the table's gradient should be summed from two partials"
    np.testing.assert_allclose(one, ref, rtol=0, atol=1e-5 * np.abs(one).max())


@needs_two
def test_stress_many_short_fused_steps_through_lookup_tables_keep_their_bits():
    """MakemoreMLP's lookup_linear over 16 rows of a 10-id table runs through the tables, split
    by blocks of output units: many short two-thread fused steps, eager and compiled, all give
    the first one's bits, which are one thread's but for the table's (its gradient a sum of one
    part a task, within rounding); a lost, doubled or racing task would show in them."""
    from burtorch.optim import SGD

    bt.manual_seed(6)
    model = nn.MakemoreMLP(vocab=10, block=16, emb=16, hidden=64, dtype=bt.float32)
    r = random.Random(9)
    batch = [([r.randrange(10) for _ in range(16)], r.randrange(10)) for _ in range(16)]
    pv = model.parameter_vector()
    start = pv.numpy().copy()
    opt = SGD(model.parameters(), lr=0.5)
    opt.fused_step(model, batch, chunk=16, threads=1)
    one = _widened(pv)
    pv.set_data(start)
    opt.fused_step(model, batch, chunk=16, threads=2)
    two = _widened(pv)
    table = model.embed.weight.size  # registered first
    np.testing.assert_array_equal(two[table:], one[table:])
    np.testing.assert_allclose(two[:table], one[:table], rtol=0, atol=1e-5 * np.abs(one[:table]).max())
    for i in range(80):
        pv.set_data(start)
        opt.fused_step(model, batch, chunk=16, threads=2, compile=bool(i % 2))
        np.testing.assert_array_equal(_widened(pv), two)


@needs_two
def test_a_call_that_raises_restores_the_thread_count():
    """grad_oracle and fused_step cap native work at their count for the call only (thread_cap):
    the process's count is back after a call that fails midway, eager, compiled or fused."""
    from burtorch.optim import SGD

    bt.set_num_threads(2)
    model = nn.MakemoreMLP(vocab=11, block=4, emb=5, hidden=7, dtype=bt.float32)
    bad = [([1, 2, 3, 99], 5)] * 4  # an id past the vocabulary
    for kw in ({}, {"chunk": 2}, {"compile": True}):
        with pytest.raises(IndexError):
            bt.grad_oracle(model, bad, threads=1, **kw)
        assert bt.get_num_threads() == 2
    with pytest.raises(IndexError):
        SGD(model.parameters(), lr=0.1).fused_step(model, bad, chunk=4, threads=1)
    assert bt.get_num_threads() == 2
