"""Models through recorded programs: grad_oracle(compile=True) and per_sample_grads equal the eager
oracle and eager per-sample sweeps bitwise, every parameter gradient, FP32 and FP64."""
import random

import numpy as np
import pytest

import burtorch as bt
from burtorch.nn import MakemoreMLP, MiniGPT
from cores import needs_two


def gpt(dtype):
    return MiniGPT(vocab=13, block=6, dim=8, layers=2, heads=2, dtype=dtype), \
        lambda r, T=6: ([r.randrange(13) for _ in range(T)], [r.randrange(13) for _ in range(T)])


def mlp(dtype):
    return MakemoreMLP(vocab=11, block=4, emb=5, hidden=7, dtype=dtype), \
        lambda r: ([r.randrange(11) for _ in range(4)], r.randrange(11))


@pytest.mark.parametrize("make", [gpt, mlp])
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_compiled_oracle_equals_eager_bitwise(make, dtype):
    bt.manual_seed(1)
    model, sample = make(dtype)
    r = random.Random(2)
    batch = [sample(r) for _ in range(12)]
    pv = model.parameter_vector()
    eager_loss = bt.grad_oracle(model, batch)
    eager = pv.numpy("grads").copy()
    compiled_loss = bt.grad_oracle(model, batch, compile=True, threads=1)
    assert compiled_loss == eager_loss
    np.testing.assert_array_equal(pv.numpy("grads"), eager)
    G, L = bt.per_sample_grads(model, batch)
    assert G.shape == (12, model.num_parameters()) and G.dtype == (np.float32 if dtype == bt.float32 else np.float64)
    for i, s in enumerate(batch):  # each row is that sample's own eager sweep
        model.zero_grad()
        cp = bt.checkpoint(dtype=dtype) if False else pv.arena.checkpoint()
        loss = model.loss(*s)
        L_i = loss.data
        loss.backward()
        pv.arena.rewind(cp)
        assert L[i] == L_i
        np.testing.assert_array_equal(G[i], pv.numpy("grads"))


def _eager_chunks_of_4(make, dtype):
    """A model, 11 samples, and the eager oracle's loss and grads over chunks of 4 of them."""
    bt.manual_seed(5)
    model, sample = make(dtype)
    r = random.Random(6)
    batch = [sample(r) for _ in range(11)]
    eager_loss = bt.grad_oracle(model, batch, chunk=4)
    return model, batch, eager_loss, model.parameter_vector().numpy("grads").copy()


@pytest.mark.parametrize("make", [gpt, mlp])
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_compiled_chunks_equal_eager_chunks(make, dtype):
    """grad_oracle(compile=True, chunk=k): one thread is the eager chunked oracle bit for bit
    (a last, shorter chunk included, and continuing from grads already there)."""
    model, batch, eager_loss, eager = _eager_chunks_of_4(make, dtype)
    pv = model.parameter_vector()
    assert bt.grad_oracle(model, batch, chunk=4, compile=True, threads=1) == eager_loss
    np.testing.assert_array_equal(pv.numpy("grads"), eager)
    bt.grad_oracle(model, batch[:3], chunk=4)
    bt.grad_oracle(model, batch, chunk=4, zero_grad=False)
    eager_more = pv.numpy("grads").copy()
    bt.grad_oracle(model, batch[:3], chunk=4, compile=True, threads=1)
    bt.grad_oracle(model, batch, chunk=4, compile=True, zero_grad=False, threads=1)
    np.testing.assert_array_equal(pv.numpy("grads"), eager_more)


@pytest.mark.parametrize("make", [gpt, mlp])
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@needs_two
def test_compiled_chunks_on_two_threads_agree_with_eager_chunks(make, dtype):
    """Two threads sum blocks of chunks apart: within rounding of the eager chunked oracle."""
    model, batch, eager_loss, eager = _eager_chunks_of_4(make, dtype)
    pv = model.parameter_vector()
    tol = 1e-5 if dtype == bt.float32 else 1e-12
    for chunk in (2, 4):
        threaded_loss = bt.grad_oracle(model, batch, chunk=chunk, compile=True, threads=2)
        assert threaded_loss == pytest.approx(eager_loss, rel=tol)
        np.testing.assert_allclose(pv.numpy("grads"), eager, rtol=0, atol=tol * np.abs(eager).max())
    from burtorch.oracle_compiled import _programs
    chunk_programs = [k for k in _programs[model] if k != "params" and k[0][0] == "chunk"]
    assert len(chunk_programs) == 4  # chunks of 4 and of 3 (11 = 4 + 4 + 3), of 2 and of 1


class BagMLP(MakemoreMLP):
    """Contexts of any length (their mean embedding): one chunk may mix sample shapes."""

    def loss(self, context, target):
        e = self.embed(context).flatten()
        n = len(context)
        x = bt.cat([bt.reduce_mean([e[j * self.emb_dim + c] for j in range(n)]) for c in range(self.emb_dim)])
        return bt.cross_entropy(self.fc2(self.fc1(bt.cat([x] * self.block)).tanh()), target)

    def loss_batch(self, samples):
        return bt.reduce_mean([self.loss(*s) for s in samples])


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_chunks_over_runs_of_shapes_and_a_mixed_chunk(threads):
    """Runs of chunks of one shape replay with their ids packed natively, a chunk mixing shapes
    through its compound sample; one thread is the eager chunked oracle bit for bit."""
    bt.manual_seed(11)
    model = BagMLP(vocab=11, block=4, emb=5, hidden=7, dtype=bt.float64)
    r = random.Random(12)
    lengths = (4, 4, 4, 4, 2, 2, 4, 3, 4, 4, 1)  # chunks of 2: [4 4] [4 4] [2 2] [4 3] [4 4] [1]
    batch = [([r.randrange(11) for _ in range(n)], r.randrange(11)) for n in lengths]
    pv = model.parameter_vector()
    eager_loss = bt.grad_oracle(model, batch, chunk=2)
    eager = pv.numpy("grads").copy()
    for _ in range(2):  # traced, then from the cached programs
        loss = bt.grad_oracle(model, batch, chunk=2, compile=True, threads=threads)
        if threads == 1:
            assert loss == eager_loss
            np.testing.assert_array_equal(pv.numpy("grads"), eager)
        else:
            assert loss == pytest.approx(eager_loss, rel=1e-12)
            np.testing.assert_allclose(pv.numpy("grads"), eager, rtol=0, atol=1e-12 * np.abs(eager).max())
    from burtorch.oracle_compiled import _programs
    keys = {key[0] for key in _programs[model] if key != "params" and key[0][0] == "chunk"}
    # a chunk of one shape is keyed by its size and that shape, a mixed one by every shape
    assert keys == {("chunk", 2, (4, 0)), ("chunk", 2, (2, 0)), ("chunk", (4, 0), (3, 0)), ("chunk", 1, (1, 0))}


class BranchyMLP(MakemoreMLP):
    """A chunk loss that branches on its value: a guard the replay checks for every chunk."""

    threshold = 0.0

    def loss_batch(self, samples):
        loss = super().loss_batch(samples)
        if loss > self.threshold:
            return loss * 0.5
        return loss


def test_compiled_chunks_whose_guard_fails_run_eagerly():
    bt.manual_seed(7)
    model = BranchyMLP(vocab=11, block=4, emb=5, hidden=7, dtype=bt.float64)
    r = random.Random(8)
    batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(24)]
    pv = model.parameter_vector()
    cp = pv.arena.checkpoint()
    raw = sorted(MakemoreMLP.loss_batch(model, batch[i:i + 2]).data for i in range(0, 24, 2))
    pv.arena.rewind(cp)
    model.threshold = (raw[5] + raw[6]) / 2  # half the chunks on each side: guards fail for some
    assert raw[0] < model.threshold < raw[-1]
    eager_loss = bt.grad_oracle(model, batch, chunk=2)
    eager = pv.numpy("grads").copy()
    # the chunks that fail a guard are swept eagerly after their run: the same terms, added later
    assert bt.grad_oracle(model, batch, chunk=2, compile=True, threads=1) == pytest.approx(eager_loss, rel=1e-14)
    np.testing.assert_allclose(pv.numpy("grads"), eager, rtol=0, atol=1e-13 * np.abs(eager).max())
    assert np.abs(eager).max() > 0


def test_a_chunk_swept_eagerly_after_a_failed_guard_still_refuses_a_non_finite_loss():
    class InfOnOneSide(BranchyMLP):
        def loss_batch(self, samples):
            loss = MakemoreMLP.loss_batch(self, samples)
            return loss * 0.5 if loss > self.threshold else loss * float("inf")

    bt.manual_seed(7)
    model = InfOnOneSide(vocab=11, block=4, emb=5, hidden=7, dtype=bt.float64)
    r = random.Random(8)
    batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(24)]
    pv = model.parameter_vector()
    cp = pv.arena.checkpoint()
    raw = [MakemoreMLP.loss_batch(model, batch[i:i + 2]).data for i in range(0, 24, 2)]
    pv.arena.rewind(cp)
    model.threshold = sorted(raw)[len(raw) // 2] - 1e-12  # chunks on both sides
    finite_first = max(range(len(raw)), key=raw.__getitem__)  # trace on the finite side
    order = [finite_first] + [c for c in range(len(raw)) if c != finite_first]
    batch = [s for c in order for s in batch[2 * c:2 * c + 2]]
    # the traced program keeps the finite branch; the chunks on the other side fail its guard,
    # are swept eagerly, and their loss is inf there
    with pytest.raises(FloatingPointError, match="inf"):
        bt.grad_oracle(model, batch, chunk=2, compile=True, threads=1)


def test_compiled_chunks_check_their_arguments():
    model, sample = mlp(bt.float32)
    r = random.Random(9)
    batch = [sample(r) for _ in range(4)]
    with pytest.raises(ValueError, match="loss_fn"):
        bt.grad_oracle(model, batch, chunk=2, compile=True, loss_fn=lambda m, s: m.loss(*s))
    with pytest.raises(ValueError, match="same number of id parts"):
        bt.grad_oracle(model, batch[:3] + [(batch[3][0],)], chunk=2, compile=True)
    with pytest.raises(ValueError, match="loss_batch"):
        bt.grad_oracle(object(), batch, chunk=2, compile=True)


def test_mixed_shapes_and_program_reuse():
    bt.manual_seed(3)
    model, sample = gpt(bt.float64)
    r = random.Random(4)
    batch = [sample(r, T) for T in (6, 6, 3, 3, 6, 2)]
    pv = model.parameter_vector()
    eager_loss = bt.grad_oracle(model, batch)
    eager = pv.numpy("grads").copy()
    assert bt.grad_oracle(model, batch, compile=True, threads=1) == eager_loss
    np.testing.assert_array_equal(pv.numpy("grads"), eager)
    from burtorch.oracle_compiled import _programs
    assert len([k for k in _programs[model] if k != "params"]) == 3  # one program per shape


def test_partial_gradient_wrt_head_only():
    bt.manual_seed(5)
    model, sample = gpt(bt.float64)
    r = random.Random(6)
    batch = [sample(r) for _ in range(4)]
    head = [model.head.weight, model.head.bias]
    G_full, _ = bt.per_sample_grads(model, batch)
    G_head, L = bt.per_sample_grads(model, batch, wrt=head)
    from burtorch.oracle_compiled import sample_program
    full, part = sample_program(model, batch[0]), sample_program(model, batch[0], wrt=head)
    assert part.swept < full.swept / 4 and len(part) == len(full)
    # the head's parameters are the last ones of parameter_vector()
    np.testing.assert_array_equal(G_head, G_full[:, -G_head.shape[1]:])


def test_compiled_training_learns():
    bt.manual_seed(7)
    model, sample = mlp(bt.float64)
    opt = bt.optim.SGD(model.parameters(), lr=0.5)
    r = random.Random(8)
    batch = [sample(r) for _ in range(16)]
    first = bt.grad_oracle(model, batch, compile=True)
    for _ in range(30):
        loss = bt.grad_oracle(model, batch, compile=True)
        opt.step()
    assert loss < 0.7 * first


def test_bad_ids_for_compiled_oracle():
    model, sample = mlp(bt.float64)
    with pytest.raises(IndexError):
        bt.grad_oracle(model, [([0, 1, 2, 3], 1), ([0, 1, 2, 99], 1)], compile=True)
    with pytest.raises(IndexError):  # the same check for the ids of a chunk's program
        bt.grad_oracle(model, [([0, 1, 2, 3], 1), ([0, 1, 2, 99], 1)], compile=True, chunk=2)
    good = [([0, 1, 2, 3], 1)] * 4
    bt.grad_oracle(model, good, compile=True, chunk=2)  # traced: later chunks are packed natively
    with pytest.raises(IndexError, match="sample 3"):
        bt.grad_oracle(model, good[:3] + [([0, 1, 2, 99], 1)], compile=True, chunk=2)
    with pytest.raises(IndexError, match="sample 2"):
        bt.grad_oracle(model, good[:2] + [([0, 1, 2, 3], -1), good[0]], compile=True, chunk=2)
    with pytest.raises(TypeError, match="ids must be ints"):
        bt.grad_oracle(model, good[:3] + [([0, 1, 2, 1.5], 1)], compile=True, chunk=2)
    with pytest.raises(ValueError, match="chunk"):
        bt.grad_oracle(model, [([0, 1, 2, 3], 1)], compile=True, chunk=0)


def test_chunk_ids_of_every_kind_read_alike():
    """Plain ints in lists take a fast path; tuples, bools and numpy ints the general one: the
    same gradient either way, and an int beyond int64 is out of range on both."""
    model, _ = mlp(bt.float64)
    plain = [([0, 1, 2, 3], 1), ([3, 2, 1, 0], 2)] * 2
    loss = bt.grad_oracle(model, plain, compile=True, chunk=2)
    grads = model.parameter_vector().numpy("grads").copy()
    mixed = [((0, True, 2, np.int64(3)), 1), ([3, 2, 1, 0], np.int32(2))] * 2
    assert bt.grad_oracle(model, mixed, compile=True, chunk=2) == loss
    np.testing.assert_array_equal(model.parameter_vector().numpy("grads"), grads)
    for huge in ([([0, 1, 2, 2 ** 70], 1)], [((0, 1, 2, np.uint64(2 ** 63)), 1)]):
        with pytest.raises(IndexError, match="out of range"):
            bt.grad_oracle(model, plain[:3] + huge, compile=True, chunk=2)



@pytest.mark.parametrize("bad", [-1, -5, 11, 2 ** 30, 2 ** 40, -(2 ** 40), -(2 ** 63)])
def test_a_plain_int_id_out_of_range_is_named_by_its_exact_value(bad):
    """The fast path reads one-digit ints inline and others through CPython: either way the
    error names the id as written (a sign or a digit lost would accept it or name another)."""
    model, _ = mlp(bt.float64)
    plain = [([0, 1, 2, 3], 1), ([3, 2, 1, 0], 2)] * 2
    with pytest.raises(IndexError, match=f"sample 3: id {bad} at position 6 is out of range"):
        bt.grad_oracle(model, plain[:3] + [([0, 1, bad, 3], 1)], compile=True, chunk=2)

class _ClearsItsList:
    """An id whose __index__ empties the list holding it: reading on would run past its end."""

    def __init__(self, value):
        self.value, self.victim = value, None

    def __index__(self):
        if self.victim is not None:
            self.victim.clear()
        return self.value


@pytest.mark.parametrize("chunk", [1, 2])
def test_an_id_that_changes_the_batch_while_it_is_read_is_a_value_error(chunk):
    model, _ = mlp(bt.float64)
    good = [([0, 1, 2, 3], 1)] * 4
    bt.grad_oracle(model, good, compile=True, chunk=chunk)  # traced: the next call replays natively
    before = model.parameter_vector().numpy("grads").copy()
    evil = _ClearsItsList(2)
    ctx = [0, 1, evil, 3]
    evil.victim = ctx
    with pytest.raises(ValueError, match="changed during the replay"):
        bt.grad_oracle(model, good[:3] + [(ctx, 1)], compile=True, chunk=chunk)
    np.testing.assert_array_equal(model.parameter_vector().numpy("grads"), before)  # nothing was added


def test_per_sample_grads_into_a_reused_out_and_workspace_reuse():
    bt.manual_seed(9)
    model, sample = gpt(bt.float32)
    r = random.Random(10)
    batch = [sample(r) for _ in range(5)]
    G, L = bt.per_sample_grads(model, batch)
    out = np.full_like(G, np.nan)  # whatever the buffer held is overwritten
    G2, L2 = bt.per_sample_grads(model, batch, out=out)
    assert G2 is out
    np.testing.assert_array_equal(G2, G)
    np.testing.assert_array_equal(L2, L)
    head = [model.head.weight, model.head.bias]
    for _ in range(2):  # a partial program zeroes only the grads its sweep uses: still exact on reuse
        G_head, _ = bt.per_sample_grads(model, batch, wrt=head)
        np.testing.assert_array_equal(G_head, G[:, -G_head.shape[1]:])
    reversed_rows = np.empty(G.shape, np.float32)[::-1]
    for bad in (np.empty((5, 3), np.float32), np.empty(G.shape, np.float64), reversed_rows, [[0.0] * G.shape[1]] * 5):
        with pytest.raises(ValueError, match="out must be"):
            bt.per_sample_grads(model, batch, out=bad)


def test_compiled_oracle_continues_from_existing_grads_across_shapes():
    bt.manual_seed(11)
    model, sample = gpt(bt.float32)
    r = random.Random(12)
    batch = [sample(r, T) for T in (6, 3, 3, 6)]
    pv = model.parameter_vector()
    bt.grad_oracle(model, batch[:2])
    bt.grad_oracle(model, batch, zero_grad=False)
    eager = pv.numpy("grads").copy()
    # one thread: the eager order exactly (more threads sum blocks of samples apart, then add)
    bt.grad_oracle(model, batch[:2], compile=True, threads=1)
    bt.grad_oracle(model, batch, compile=True, zero_grad=False, threads=1)
    np.testing.assert_array_equal(pv.numpy("grads"), eager)


def test_replay_samples_checks_its_input():
    model, sample = mlp(bt.float64)
    from burtorch.oracle_compiled import sample_program
    prog = sample_program(model, ([0, 1, 2, 3], 1))
    shape = (4, 0)
    values = np.zeros(2)
    ok = [([0, 1, 2, 3], 1), ([3, 2, 1, 0], 2)]
    stop, failed = prog._replay_samples(ok, 0, shape, "values", 1.0, values)
    assert (stop, failed) == (2, []) and np.all(values != 0)
    # a sample of another shape ends the run there; the first one must fit
    assert prog._replay_samples(ok + [([0, 1], 1)], 0, shape, "values", 1.0, np.zeros(3))[0] == 2
    with pytest.raises(TypeError, match="shape of its program"):
        prog._replay_samples([([0, 1], 1)], 0, shape, "values", 1.0)
    with pytest.raises(TypeError, match="list of samples or an ArrayBatch"):
        prog._replay_samples(iter(ok), 0, shape, "values", 1.0)
    with pytest.raises(TypeError, match="buffer"):  # a tuple holds an ArrayBatch's arrays
        prog._replay_samples(tuple(ok), 0, shape, "values", 1.0)
    with pytest.raises(IndexError, match="sample 1: id 11"):
        prog._replay_samples([([0, 1, 2, 3], 1), ([0, 1, 2, 3], 11)], 0, shape, "values", 1.0)
    with pytest.raises(TypeError, match="ids must be ints"):
        prog._replay_samples([([0, 1, 2.5, 3], 1)], 0, shape, "values", 1.0)
    with pytest.raises(ValueError, match="expected 2 elements"):
        prog._replay_samples(ok, 0, shape, "values", 1.0, np.zeros(3))
    with pytest.raises(TypeError, match="float64"):
        prog._replay_samples(ok, 0, shape, "values", 1.0, np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="writable"):
        prog._replay_samples(ok, 0, shape, "values", 1.0, b"\0" * 16)
    with pytest.raises(ValueError, match="out is required"):
        prog._replay_samples(ok, 0, shape, "rows", 1.0)
    with pytest.raises(IndexError, match="start"):
        prog._replay_samples(ok, 2, shape, "values", 1.0)


def test_compiled_training_needs_no_numpy():
    import subprocess
    import sys
    code = ("import sys, random, burtorch as bt\n"
            "from burtorch.nn import MiniGPT\n"
            "m = MiniGPT(vocab=13, block=6, dim=8, layers=2, heads=2)\n"
            "r = random.Random(0)\n"
            "batch = [([r.randrange(13) for _ in range(6)], [r.randrange(13) for _ in range(6)]) for _ in range(4)]\n"
            "opt = bt.optim.SGD(m.parameters(), lr=0.1)\n"
            "for _ in range(3):\n"
            "    loss = bt.grad_oracle(m, batch, compile=True); opt.step()\n"
            "assert loss == loss\n"
            "print('numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


def test_long_rows_into_a_reused_out_equal_fresh_rows():
    # rows of more than 4096 values go out with non-temporal stores into a reused out=; an odd d
    # leaves most rows unaligned, so the aligned middle and the scalar ends are all exercised
    bt.manual_seed(13)
    model = MakemoreMLP(vocab=11, block=16, emb=16, hidden=33, dtype=bt.float32)
    r = random.Random(14)
    batch = [([r.randrange(11) for _ in range(16)], r.randrange(11)) for _ in range(7)]
    assert model.num_parameters() % 2 == 1 and model.num_parameters() > 4096
    G, L = bt.per_sample_grads(model, batch)
    out = np.full_like(G, np.nan)
    for _ in range(2):
        G2, L2 = bt.per_sample_grads(model, batch, out=out)
        np.testing.assert_array_equal(G2, G)
    pv = model.parameter_vector()
    for i, s in enumerate(batch):
        model.zero_grad()
        cp = pv.arena.checkpoint()
        model.loss(*s).backward()
        pv.arena.rewind(cp)
        np.testing.assert_array_equal(G[i], pv.numpy("grads"))


@pytest.mark.parametrize("threads", [1, 2])
def test_replay_workspaces_carry_no_gradient_from_one_call_into_the_next(threads):
    # A workspace's parameter grads are zeroed as each call reads them out, not at the start of
    # the next: calls in every mode, one after another on the same programs, each equal eager.
    bt.manual_seed(13)
    model, sample = mlp(bt.float64)
    r = random.Random(14)
    pv = model.parameter_vector()
    head = [model.fc2.weight, model.fc2.bias]
    for _ in range(3):
        batch = [sample(r) for _ in range(6)]
        bt.grad_oracle(model, batch)
        eager = pv.numpy("grads").copy()
        for chunk in (1, 3):
            bt.grad_oracle(model, batch, compile=True, chunk=chunk, threads=threads)
            np.testing.assert_allclose(pv.numpy("grads"), eager, rtol=1e-12, atol=1e-15)
        G, _ = bt.per_sample_grads(model, batch)
        np.testing.assert_allclose(G.mean(axis=0), eager, rtol=1e-12, atol=1e-15)
        G_head, _ = bt.per_sample_grads(model, batch, wrt=head)
        np.testing.assert_array_equal(G_head, G[:, -G_head.shape[1]:])
        bt.grad_oracle(model, batch, compile=True, threads=threads)
        np.testing.assert_allclose(pv.numpy("grads"), eager, rtol=1e-12, atol=1e-15)
        for p in model.parameters():  # a step, so each call reads new parameters
            p.set_data((np.array(p.tolist()) - 0.1 * np.array(p.tolist("grads"))).tolist())


class _L2OnFc1(MakemoreMLP):
    """fc1's weight also enters the loss elementwise (an L2 term): a replay must copy it into its
    frame; fc2's weight only feeds its linear layer and is read in place."""

    def loss_batch(self, samples):
        w = self.fc1.weight
        return super().loss_batch(samples) + (w * w).sum() * 0.01


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@pytest.mark.parametrize("chunk", [1, 4])
def test_replays_read_linear_weights_in_place_unless_another_op_reads_them(dtype, chunk):
    from burtorch.oracle_compiled import _cached_program

    bt.manual_seed(8)
    r = random.Random(9)
    for cls, in_place in ((MakemoreMLP, 20 * 7 + 7 * 11), (_L2OnFc1, 7 * 11)):
        model = cls(vocab=11, block=4, emb=5, hidden=7, dtype=dtype)
        if cls is _L2OnFc1 and chunk == 1:
            continue  # the L2 term is in loss_batch only
        batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(8)]
        pv = model.parameter_vector()
        for _ in range(2):  # the second replay reads the weights the first step moved
            eager_loss = bt.grad_oracle(model, batch, chunk=chunk)
            eager = pv.numpy("grads").copy()
            assert bt.grad_oracle(model, batch, compile=True, chunk=chunk, threads=1) == eager_loss
            np.testing.assert_array_equal(pv.numpy("grads"), eager)
            pv.set_data(pv.numpy() - 0.1 * eager)
        prog = _cached_program(model, ("chunk", chunk, (4, 0)) if chunk > 1 else (4, 0))
        assert prog.weights_read_in_place == in_place, cls.__name__


@pytest.mark.parametrize("chunk", [1, 4])
def test_a_one_thread_replay_whose_last_sample_is_non_finite_keeps_or_zeroes_the_grads(chunk):
    """A one-thread replay that starts the grads from zero adds the linear weights' gradients
    straight into the arena. A non-finite loss in the last sample, after the others have added
    theirs, leaves the grads as they were before the call, whether it started them from zero or
    continued from them (zero_grad=False) (issue 41: a failed call changes nothing)."""
    bt.manual_seed(3)
    model = MakemoreMLP(vocab=11, block=4, emb=5, hidden=7, dtype=bt.float64)
    r = random.Random(4)
    batch = [([r.randrange(10) for _ in range(4)], r.randrange(11)) for _ in range(7)] + [([10, 1, 2, 3], 0)]
    pv = model.parameter_vector()
    bt.grad_oracle(model, batch, compile=True, threads=1, chunk=chunk)  # traced while every loss is finite
    before = pv.numpy("grads").copy()
    assert np.abs(np.array(model.fc1.weight.tolist("grads"))).max() > 0
    table = model.embed.weight.tolist()
    table[10 * 5] = float("nan")  # token 10 appears in the last sample only
    model.embed.weight.set_data(table)
    with pytest.raises(FloatingPointError, match="sample"):
        bt.grad_oracle(model, batch, compile=True, threads=1, chunk=chunk, zero_grad=False)
    np.testing.assert_array_equal(pv.numpy("grads"), before)
    with pytest.raises(FloatingPointError, match="sample"):
        bt.grad_oracle(model, batch, compile=True, threads=1, chunk=chunk)
    np.testing.assert_array_equal(pv.numpy("grads"), before)


class _DeadRelu(MakemoreMLP):
    """fc1 followed by a ReLU: with a very negative bias every unit is off, so the sweep skips
    fc1's record (its outputs carry no gradient)."""

    def loss_batch(self, samples):
        ids = [i for ctx, _ in samples for i in ctx]
        x = self.embed(ids).reshape(len(samples), self.block * self.emb_dim)
        return bt._core.cross_entropy(self.fc2(self.fc1(x).relu()), [t for _, t in samples])


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_a_weight_whose_record_the_replay_skips_gets_a_zero_grad(dtype):
    """A one-thread replay writes the in-place weights' grads with their first contribution
    (nothing zeroes them first): a weight whose record the sweep skips must still come out
    zero, not with the grads an earlier call left."""
    bt.manual_seed(11)
    model = _DeadRelu(vocab=11, block=4, emb=5, hidden=7, dtype=dtype)
    r = random.Random(12)
    batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(8)]
    pv = model.parameter_vector()
    live = model.fc1.bias.tolist()
    model.fc1.bias.set_data([-1e3] * 7)  # every unit off
    eager_loss = bt.grad_oracle(model, batch, chunk=8)
    eager = pv.numpy("grads").copy()
    assert not np.array(model.fc1.weight.tolist("grads")).any() and np.abs(eager).max() > 0
    model.fc1.bias.set_data(live)
    bt.grad_oracle(model, batch, chunk=8, compile=True, threads=1)  # traced; leaves fc1's grads nonzero
    assert np.abs(np.array(model.fc1.weight.tolist("grads"))).max() > 0
    model.fc1.bias.set_data([-1e3] * 7)
    assert bt.grad_oracle(model, batch, chunk=8, compile=True, threads=1) == eager_loss
    np.testing.assert_array_equal(pv.numpy("grads"), eager)
