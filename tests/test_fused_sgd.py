"""SGD.fused_step: the SGD update of linear weights applied inside the backward sweep.

Its promise is exact: the same parameters, to the bit, as grad_oracle + SGD.step, whether or not
a weight could be fused; these tests hold it to that on both models, both dtypes, with weight
decay, threads, shared weights, dead branches and the fallbacks. Two exceptions on several
threads sum one partial gradient per thread, the same on every run and within rounding of one
thread's: a layer of at least 1.5 MiB of weights (its input gradient), and a compiled step's
lookup whose rows only the next linear record reads (the table's gradient). MakemoreMLP's own
lookup runs inside its first layer's record (lookup_linear), one thread's bits on any count.
"""
import random

import numpy as np
import pytest

import burtorch as bt
from burtorch import _core, nn
from burtorch.optim import SGD
from burtorch.oracle import grad_oracle
from cores import ALLOWED, needs_two
from lookup_models import TwoRecordMLP


def _twins(make, n=2):
    """n models with the same parameters (the first's), copied through numpy: a tenth of the time
    of a round trip through Python lists on the wide layers."""
    first, *rest = (make() for _ in range(n))
    for other in rest:
        for (_, pa), (_, pb) in zip(first.state_dict().items(), other.state_dict().items()):
            pb.set_data(pa.numpy())
    return first, *rest


def _params(model):
    """Each parameter's values, flat and widened to float64 (exactly, as tolist gives them): read
    through numpy, a tenth of the time of tolist on the wide layers."""
    return {k: v.numpy().astype(np.float64).ravel() for k, v in model.state_dict().items()}


def _assert_same_params(a, b):
    pa, pb = _params(a), _params(b)
    for k in pa:
        assert np.array_equal(pa[k], pb[k]), f"{k}: max diff {np.abs(pa[k] - pb[k]).max()}"


def _mlp_batches(rng, b, steps, block=16):
    return [[([rng.randrange(27) for _ in range(block)], rng.randrange(27)) for _ in range(b)] for _ in range(steps)]


def _gpt_batches(rng, b, steps, vocab=65, block=8):
    return [[([rng.randrange(vocab) for _ in range(block)], [rng.randrange(vocab) for _ in range(block)])
             for _ in range(b)] for _ in range(steps)]


def _linears(model):
    count = isinstance(model, nn.Linear)
    for _, child in model.children():
        count += _linears(child)
    return count


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@pytest.mark.parametrize("b", [1, 5])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_fused_step_is_bitwise_the_unfused_step_mlp(dtype, b, wd, rng):
    m1, m2 = _twins(lambda: nn.MakemoreMLP(vocab=27, block=16, emb=8, hidden=48, dtype=dtype))
    o1, o2 = SGD(m1.parameters(), lr=0.1, weight_decay=wd), SGD(m2.parameters(), lr=0.1, weight_decay=wd)
    for batch in _mlp_batches(rng, b, 4):
        l1 = grad_oracle(m1, batch, chunk=b)
        o1.step()
        l2 = o2.fused_step(m2, batch, chunk=b)
        assert l1 == l2
        assert o2.fused_weights == 2
    _assert_same_params(m1, m2)
    # Training moved the weights (the comparison is not between two untouched models).
    assert not np.array_equal(_params(m1)["fc1.weight"], _params(_twins(
        lambda: nn.MakemoreMLP(vocab=27, block=16, emb=8, hidden=48, dtype=dtype))[0])["fc1.weight"])


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@pytest.mark.parametrize("wd", [0.0, 0.01])
@pytest.mark.parametrize("compiled", [False, True])
def test_fused_step_is_bitwise_the_unfused_step_at_ragged_widths(dtype, wd, compiled, rng):
    # Layer widths that are no multiple of a vector (21 and 37 inputs), and output counts that are
    # no multiple of a register tile's rows: the SGD update of a tile's partial vectors and rows.
    make = lambda: nn.MakemoreMLP(vocab=27, block=7, emb=3, hidden=37, dtype=dtype)  # noqa: E731
    m1, m2 = _twins(make)
    o1, o2 = SGD(m1.parameters(), lr=0.1, weight_decay=wd), SGD(m2.parameters(), lr=0.1, weight_decay=wd)
    for batch in _mlp_batches(rng, 9, 3, block=7):
        l1 = grad_oracle(m1, batch, chunk=9)
        o1.step()
        assert o2.fused_step(m2, batch, chunk=9, compile=compiled) == l1
        assert o2.fused_weights == 2
    _assert_same_params(m1, m2)
    assert not np.array_equal(_params(m1)["fc2.weight"], _params(_twins(make)[0])["fc2.weight"])
    # every other gradient is the batch's; the fused weights' are left as they were (zero here)
    s1, s2 = m1.state_dict(), m2.state_dict()
    for k in s1:
        want = [0.0] * s1[k].size if k.endswith("c1.weight") or k.endswith("c2.weight") else s1[k].tolist("grads")
        assert s2[k].tolist("grads") == want, k


@pytest.mark.parametrize("b", [1, 3])
@pytest.mark.parametrize("compiled", [False, True])
def test_fused_step_is_bitwise_the_unfused_step_gpt(b, compiled, rng):
    bt.manual_seed(3)
    m1, m2 = _twins(lambda: nn.MiniGPT.paper(vocab=65, dtype=bt.float32))
    o1, o2 = SGD(m1.parameters(), lr=0.05), SGD(m2.parameters(), lr=0.05)
    for batch in _gpt_batches(rng, b, 2):
        l1 = grad_oracle(m1, batch, chunk=b)
        o1.step()
        assert o2.fused_step(m2, batch, chunk=b, compile=compiled) == l1
        assert o2.fused_weights == _linears(m2) == 25
    _assert_same_params(m1, m2)


@needs_two
def test_fused_step_threads_split_a_wide_layer_with_the_same_bits(rng):
    # 1 x 1024 x 256 multiply-adds: above the split threshold, so the fused pass runs as column tasks.
    m1, m2 = _twins(lambda: nn.MakemoreMLP.paper(hidden=256, dtype=bt.float32))
    o1, o2 = SGD(m1.parameters(), lr=0.1), SGD(m2.parameters(), lr=0.1)
    for batch in _mlp_batches(rng, 1, 3) + _mlp_batches(rng, 6, 2):
        grad_oracle(m1, batch, chunk=len(batch), threads=1)
        o1.step()
        o2.fused_step(m2, batch, chunk=len(batch), threads=2)
        assert o2.fused_weights == 2
    _assert_same_params(m1, m2)


@pytest.mark.parametrize("case", ["momentum", "several_graphs", "anomaly"])
def test_fused_step_falls_back_with_the_same_result(case, rng):
    m1, m2 = _twins(lambda: nn.MakemoreMLP(vocab=27, block=16, emb=8, hidden=16, dtype=bt.float32))
    kw = {"momentum": 0.9} if case == "momentum" else {}
    o1, o2 = SGD(m1.parameters(), lr=0.1, **kw), SGD(m2.parameters(), lr=0.1, **kw)
    chunk = 2 if case == "several_graphs" else 4
    for batch in _mlp_batches(rng, 4, 3):
        grad_oracle(m1, batch, chunk=chunk)
        o1.step()
        if case == "anomaly":
            with bt.detect_anomaly():
                o2.fused_step(m2, batch, chunk=chunk)
        else:
            o2.fused_step(m2, batch, chunk=chunk)
        assert o2.fused_weights == 0
    _assert_same_params(m1, m2)


class _TiedMLP(nn.Module):
    """fc1's weight is also read by an L2 term of the loss: it must not be fused."""

    def __init__(self):
        super().__init__(bt.float32)
        self.fc1 = nn.Linear(6, 5, dtype=self.dtype)
        self.fc2 = nn.Linear(5, 3, dtype=self.dtype)
        self.unused = nn.Linear(6, 4, dtype=self.dtype)

    def loss(self, x, t):
        x = bt.leaves(x, dtype=self.fc1.weight.dtype)
        h = self.fc1(x).tanh()
        dead = self.unused(x)  # noqa: F841  (a record in the swept range whose output the loss ignores; held,
        # as a dropped output at the top would be reclaimed at once)
        w = self.fc1.weight
        return _core.cross_entropy(self.fc2(h), t) + (w * w).sum() * 0.01


@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_fused_step_skips_shared_weights_and_steps_dead_ones(wd):
    bt.manual_seed(5)
    m1, m2 = _twins(_TiedMLP)
    o1, o2 = SGD(m1.parameters(), lr=0.2, weight_decay=wd), SGD(m2.parameters(), lr=0.2, weight_decay=wd)
    rng = random.Random(2)
    for _ in range(3):
        batch = [([rng.uniform(-1, 1) for _ in range(6)], rng.randrange(3))]
        grad_oracle(m1, batch)
        o1.step()
        o2.fused_step(m2, batch)
        # fc2 and the unused layer are fused; fc1's weight is read twice.
        assert o2.fused_weights == 2
    _assert_same_params(m1, m2)
    before = _params(_twins(_TiedMLP)[0])
    if wd:  # the dead layer's weights decayed, as the unfused step decays them
        assert not np.array_equal(_params(m2)["unused.weight"], before["unused.weight"])


def test_fused_step_refuses_a_non_finite_loss_and_changes_nothing():
    m = nn.MakemoreMLP(vocab=27, block=2, emb=4, hidden=8, dtype=bt.float32)
    opt = SGD(m.parameters(), lr=0.1)
    m.fc2.bias.set_data([float("inf")] + [0.0] * 26)
    before = _params(m)
    nodes = m.parameter_vector().arena.num_nodes
    with pytest.raises(FloatingPointError):
        opt.fused_step(m, [([1, 2], 0)])
    after = _params(m)
    for k in before:
        assert np.array_equal(before[k], after[k], equal_nan=True), k
    assert m.parameter_vector().arena.num_nodes == nodes


def test_fused_backward_bad_arguments():
    m = nn.MakemoreMLP(vocab=27, block=2, emb=4, hidden=8, dtype=bt.float64)
    opt = SGD(m.parameters(), lr=0.1)
    P = m.parameter_vector()
    with pytest.raises(TypeError):
        _core.sgd_fused_backward(3.0, opt.params, opt.state, 1.0, 0.1, 0.0, True, P)
    other = bt.Value(1.0, dtype=bt.float32) * 2.0
    with pytest.raises(ValueError, match="different arenas"):
        _core.sgd_fused_backward(other, opt.params, opt.state, 1.0, 0.1, 0.0, True, P)
    arena = P.arena
    cp = arena.checkpoint()
    loss = m.loss([1, 2], 3)
    arena.rewind(cp)
    with pytest.raises(bt.StaleValueError):
        _core.sgd_fused_backward(loss, opt.params, opt.state, 1.0, 0.1, 0.0, True, P)
    with pytest.raises(ValueError):
        opt.fused_step(m, [])
    with pytest.raises(ValueError):
        opt.fused_step(m, [([1, 2], 3)], threads=0)
    for chunk in ("2", 0, 1.5):
        with pytest.raises(ValueError, match="chunk"):
            opt.fused_step(m, [([1, 2], 3), ([2, 1], 0)], chunk=chunk)


def test_fp32_sgd_step_matches_pytorch_bit_for_bit():
    torch = pytest.importorskip("torch")
    gen = np.random.default_rng(0)
    for wd in (0.0, 0.01):
        w = gen.standard_normal(1003).astype(np.float32)
        g = gen.standard_normal(1003).astype(np.float32)
        tw = torch.tensor(w, requires_grad=True)
        tw.grad = torch.tensor(g)
        torch.optim.SGD([tw], lr=0.1, weight_decay=wd).step()
        v = bt.leaves(w.tolist(), dtype=bt.float32)
        v.set_grad(g.tolist())
        SGD([v], lr=0.1, weight_decay=wd).step()
        ours, theirs = np.array(v.tolist(), dtype=np.float32), tw.detach().numpy()
        if _core.fused_multiply_add:  # one rounding per multiply-add, as PyTorch's FMA kernels
            assert np.array_equal(ours, theirs)
        else:  # a portable build multiplies, then adds: one more rounding, of the product
            assert np.all(np.abs(ours - theirs) <= 2 * np.spacing(np.abs(w) + np.abs(theirs)))
            assert not np.array_equal(ours, w)


# ---- fused_step(compile=True): the same step replayed from a recorded program ----

@pytest.mark.parametrize("hidden", [64, 256])
@needs_two
def test_compiled_fused_step_on_two_threads_runs_the_lookup_with_its_layer(hidden, rng):
    """A chunk program whose lookup feeds only the next linear record: on two threads the compiled
    fused step runs the two as one op, each thread looking every row up itself. After one step
    every parameter but the table has one thread's bits (the same gradients reach them); the
    table takes one partial gradient per thread, summed in order: within rounding of one
    thread's, and the same on every run. MakemoreMLP's lookup_linear record, split by blocks of
    output units, does the same: its table's gradient is a sum of one part per task."""
    from burtorch import oracle_compiled

    for cls, pairs in ((TwoRecordMLP, 1), (nn.MakemoreMLP, 0)):
        make = lambda: cls(vocab=27, block=16, emb=64, hidden=hidden, dtype=bt.float32)  # noqa: E731
        m1, m2, m3 = _twins(make, 3)
        opts = [SGD(m.parameters(), lr=0.1) for m in (m1, m2, m3)]
        for step, batch in enumerate(_mlp_batches(rng, 64, 3)):
            for m, opt, threads in zip((m1, m2, m3), opts, (1, 2, 2)):
                opt.fused_step(m, batch, chunk=64, threads=threads, compile=True)
            p1, p2 = _params(m1), _params(m2)
            if step == 0:
                for k in p1:
                    if k != "embed.weight":
                        assert np.array_equal(p1[k], p2[k]), (cls.__name__, k)
                # its gradient is a sum of parts (after the step, the values differ in a few
                # elements at most, some batches in none)
                g1, g2 = (np.array(m.embed.weight.grad) for m in (m1, m2))
                assert not np.array_equal(g1, g2), "the table's gradient is one sum"
            for k in p1:
                assert np.abs(p1[k] - p2[k]).max() <= 1e-5 * np.abs(p1[k]).max(), k
            _assert_same_params(m2, m3)
        prog = oracle_compiled._cached_program(m2, oracle_compiled._uniform_chunk_key(64, (16, 0)))
        assert prog.lookups_into_layers == pairs
        assert prog.ops().get("lookup_linear", 0) == 1 - pairs


def test_a_lookup_read_elsewhere_stays_apart(rng):
    """The pair needs the looked-up rows read by the layer alone: read by another op too (here
    the loss adds their sum) the lookup stays its own record, and the two-thread step keeps one
    thread's bits for the table as well."""
    if _core._allowed_cores() < 2:
        pytest.skip("needs two cores")

    class Peeking(nn.MakemoreMLP):
        def loss_batch(self, samples):
            ids = [i for ctx, _ in samples for i in ctx]
            x = self.embed(ids).reshape(len(samples), self.block * self.emb_dim)
            logits = self.fc2(self.fc1(x).tanh())
            return _core.cross_entropy(logits, [t for _, t in samples]) + x.flatten().sum() * 1e-3

    make = lambda: Peeking(vocab=27, block=16, emb=64, hidden=64, dtype=bt.float32)  # noqa: E731
    m1, m2 = _twins(make)
    o1, o2 = SGD(m1.parameters(), lr=0.1), SGD(m2.parameters(), lr=0.1)
    for batch in _mlp_batches(rng, 64, 2):
        o1.fused_step(m1, batch, chunk=64, threads=1, compile=True)
        o2.fused_step(m2, batch, chunk=64, threads=2, compile=True)
    _assert_same_params(m1, m2)
    from burtorch import oracle_compiled

    prog = oracle_compiled._cached_program(m2, oracle_compiled._uniform_chunk_key(64, (16, 0)))
    assert prog is not None and prog.lookups_into_layers == 0
    gpt = nn.MiniGPT(vocab=65, block=8, dim=12, layers=1, heads=3, dtype=bt.float32)
    SGD(gpt.parameters(), lr=0.1).fused_step(gpt, _gpt_batches(rng, 4, 1)[0], chunk=4, threads=2, compile=True)
    prog = oracle_compiled._cached_program(gpt, oracle_compiled._uniform_chunk_key(4, (8, 8)))
    assert prog is not None and prog.lookups_into_layers == 0  # its lookups feed additions


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
def test_fused_step_on_two_threads_sums_partial_input_gradients_of_a_wider_layer(compiled, dtype, rng):
    """1024 -> 512 in float (2 MiB of weights), 1024 -> 256 in double: the two-thread backward
    splits by units, one partial input gradient each. Every run gives the same bits; the result
    stays within rounding of one thread's, which is the unfused step's."""
    if _core._allowed_cores() < 2:
        pytest.skip("needs two cores")
    hidden = 512 if dtype == bt.float32 else 256
    make = lambda: TwoRecordMLP(vocab=27, block=16, emb=64, hidden=hidden, dtype=dtype)  # noqa: E731
    m1, m2, m3 = _twins(make, 3)
    opts = [SGD(m.parameters(), lr=0.1) for m in (m1, m2, m3)]
    for batch in _mlp_batches(rng, 64, 3):
        grad_oracle(m1, batch, chunk=64, threads=1)
        opts[0].step()
        for m, opt in ((m2, opts[1]), (m3, opts[2])):
            opt.fused_step(m, batch, chunk=64, threads=2, compile=compiled)
            assert opt.fused_weights == 2
    _assert_same_params(m2, m3)
    p1, p2 = _params(m1), _params(m2)
    tol = 1e-5 if dtype == bt.float32 else 1e-12
    for k in p1:
        assert np.abs(p1[k] - p2[k]).max() <= tol * np.abs(p1[k]).max(), k
    # the embedding table takes the summed input gradient: one thread's chain differs from it
    # somewhere, which shows that the split by units ran
    assert not np.array_equal(p1["embed.weight"], p2["embed.weight"])


def test_compiled_fused_step_skips_shared_weights_and_steps_dead_ones(rng):
    """A weight two records read (an L2 term on fc1's weight) is stepped after the sweep, as the
    eager step does; and a layer whose units are all off (its record skipped) still decays."""

    class Tied(nn.MakemoreMLP):
        def loss_batch(self, samples):
            w = self.fc1.weight
            return super().loss_batch(samples) + (w * w).sum() * 0.01

    make = lambda: Tied(vocab=11, block=4, emb=5, hidden=7)  # noqa: E731
    m1, m2 = _twins(make)
    o1, o2 = SGD(m1.parameters(), lr=0.1, weight_decay=0.05), SGD(m2.parameters(), lr=0.1, weight_decay=0.05)
    r = random.Random(4)
    for _ in range(3):
        batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(6)]
        assert o2.fused_step(m2, batch, chunk=6, compile=True) == o1.fused_step(m1, batch, chunk=6)
        assert o2.fused_weights == o1.fused_weights == 1  # fc2 only
    _assert_same_params(m1, m2)


def test_compiled_fused_step_refuses_a_non_finite_loss_and_changes_nothing(rng):
    m = nn.MakemoreMLP(vocab=27, block=2, emb=4, hidden=8, dtype=bt.float32)
    opt = SGD(m.parameters(), lr=0.1)
    batch = [([1, 2], 0), ([3, 4], 1), ([5, 6], 2)]
    opt.fused_step(m, batch, chunk=3, compile=True)  # traced while finite
    m.fc2.bias.set_data([float("inf")] + [0.0] * 26)
    before = _params(m)
    grads = m.parameter_vector().numpy("grads").copy()
    with pytest.raises(FloatingPointError):
        opt.fused_step(m, batch, chunk=3, compile=True)
    after = _params(m)
    for k in before:
        assert np.array_equal(before[k], after[k], equal_nan=True), k
    assert np.array_equal(m.parameter_vector().numpy("grads"), grads)


class _Branchy(nn.MakemoreMLP):
    """A loss whose branch depends on its value: a replay's guard fails where the branch differs
    from the trace's."""

    def loss_batch(self, samples):
        loss = super().loss_batch(samples)
        return loss * 0.5 if loss > 2.4 else loss * 2.0  # ln 11 = 2.40: batches fall on both sides


def test_compiled_fused_step_steps_eagerly_where_it_cannot_replay(rng):
    """Mixed sample shapes, and a batch whose guard comes out differently from the trace, step
    eagerly with the same result; so does a chunk smaller than the batch (several graphs)."""

    m1, m2 = _twins(lambda: _Branchy(vocab=11, block=4, emb=5, hidden=7, dtype=bt.float64))
    o1, o2 = SGD(m1.parameters(), lr=0.3), SGD(m2.parameters(), lr=0.3)
    r = random.Random(5)
    branches = set()
    for _ in range(8):
        batch = [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(5)]
        l1 = o1.fused_step(m1, batch, chunk=5)
        branches.add(l1 < 2.0)  # the halved branch
        assert o2.fused_step(m2, batch, chunk=5, compile=True) == l1
    mixed = [([1, 2, 3, 4], 0), ([1, 2, 3], 1)]
    with pytest.raises(ValueError):  # the eager model refuses a short context, compiled or not
        o2.fused_step(m2, mixed, chunk=2, compile=True)
    assert o2.fused_weights == o1.fused_weights
    _assert_same_params(m1, m2)
    assert branches == {True, False}, "the batches should take both branches"


def test_sgd_step_around_fused_checks_its_spans():
    m = nn.MakemoreMLP(vocab=27, block=2, emb=4, hidden=8, dtype=bt.float64)
    opt = SGD(m.parameters(), lr=0.1)
    first = m.parameter_vector().numpy().size
    with pytest.raises(ValueError, match="inside the parameters"):
        _core.sgd_step_around_fused(opt.params, opt.state, 0.1, 0.0, [(10**9, 4)], [True])
    with pytest.raises(ValueError, match="one applied flag"):
        _core.sgd_step_around_fused(opt.params, opt.state, 0.1, 0.0, [(0, 4)], [])
    with pytest.raises(ValueError, match="finite"):
        _core.sgd_step_around_fused(opt.params, opt.state, float("nan"), 0.0, [], [])
    assert first > 0


# ---- the step taken where the threads' gradients add (several chunks on two threads)

def _gpt_arrays(rng, b, steps):
    from burtorch.data import ArrayBatch
    return [ArrayBatch(np.array([[rng.randrange(65) for _ in range(8)] for _ in range(b)]),
                       np.array([[rng.randrange(65) for _ in range(8)] for _ in range(b)])) for _ in range(steps)]


def _fused_chunks_against_unfused(m1, m2, o1, o2, batches, chunk, threads=2):
    """Steps m1 by grad_oracle + SGD.step and m2 by fused_step over the same batches; returns,
    per batch, whether m2's grads kept the sentinel they were given (the step taken where the
    threads' gradients add writes none)."""
    kept = []
    for batch in batches:
        l1 = grad_oracle(m1, batch, compile=True, chunk=chunk, threads=threads)
        o1.step()
        pv = m2.parameter_vector()
        sentinel = np.full(pv.size, 7.0)
        pv.set_grad(sentinel)
        assert o2.fused_step(m2, batch, chunk=chunk, threads=threads, compile=True) == l1
        grads = pv.numpy("grads")
        kept.append(bool(np.array_equal(grads, sentinel)))
        if not kept[-1]:  # stepped unfused: the grads are the batch's
            assert np.array_equal(grads, m1.parameter_vector().numpy("grads"))
        assert o2.state.steps == o1.state.steps
    _assert_same_params(m1, m2)
    return kept


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@pytest.mark.parametrize("wd", [0.0, 0.01])
@pytest.mark.parametrize("arrays", [False, True])
@needs_two
def test_a_step_over_chunks_on_two_threads_has_the_unfused_bits_gpt(dtype, wd, arrays, rng):
    bt.manual_seed(4)
    m1, m2 = _twins(lambda: nn.MiniGPT.paper(vocab=65, dtype=dtype))
    o1, o2 = SGD(m1.parameters(), lr=0.05, weight_decay=wd), SGD(m2.parameters(), lr=0.05, weight_decay=wd)
    batches = _gpt_arrays(rng, 8, 3) if arrays else _gpt_batches(rng, 8, 3)
    assert _fused_chunks_against_unfused(m1, m2, o1, o2, batches, chunk=2) == [True] * 3
    assert o2.fused_weights == 0


@pytest.mark.parametrize("dtype", [bt.float32, bt.float64])
@pytest.mark.parametrize("wd", [0.0, 0.01])
@needs_two
def test_a_step_over_chunks_on_two_threads_has_the_unfused_bits_mlp(dtype, wd, rng):
    """Three chunks on two threads: blocks of two chunks and one."""
    m1, m2 = _twins(lambda: nn.MakemoreMLP(vocab=27, block=16, emb=8, hidden=48, dtype=dtype))
    o1, o2 = SGD(m1.parameters(), lr=0.1, weight_decay=wd), SGD(m2.parameters(), lr=0.1, weight_decay=wd)
    assert _fused_chunks_against_unfused(m1, m2, o1, o2, _mlp_batches(rng, 12, 3), chunk=4) == [True] * 3


@pytest.mark.parametrize("case", ["one thread", "ragged", "some parameters", "momentum"])
def test_a_step_over_chunks_falls_back_with_the_same_result(case, rng):
    m1, m2 = _twins(lambda: nn.MakemoreMLP(vocab=27, block=16, emb=8, hidden=48, dtype=bt.float64))
    which = (lambda m: [m.fc1.weight, m.fc2.weight]) if case == "some parameters" else (lambda m: m.parameters())
    momentum = 0.9 if case == "momentum" else 0.0
    o1, o2 = SGD(which(m1), lr=0.1, momentum=momentum), SGD(which(m2), lr=0.1, momentum=momentum)
    b = 10 if case == "ragged" else 12
    threads = 1 if case == "one thread" else 2
    if threads > ALLOWED:
        pytest.skip("this process may use one core only")
    kept = _fused_chunks_against_unfused(m1, m2, o1, o2, _mlp_batches(rng, b, 2), chunk=4, threads=threads)
    assert kept == [False] * 2  # stepped unfused: the grads are the batch's


@needs_two
def test_a_step_over_chunks_whose_guard_fails_runs_that_chunk_eagerly_then_steps(rng):
    m1, m2 = _twins(lambda: _Branchy(vocab=11, block=4, emb=5, hidden=7, dtype=bt.float64))
    o1, o2 = SGD(m1.parameters(), lr=0.3), SGD(m2.parameters(), lr=0.3)
    r = random.Random(8)
    batches = [[([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(4)] for _ in range(12)]
    kept = _fused_chunks_against_unfused(m1, m2, o1, o2, batches, chunk=2)
    assert set(kept) == {True, False}, "some steps should replay every chunk, others not"


@needs_two
def test_a_step_over_chunks_refuses_a_non_finite_loss_and_changes_nothing(rng):
    m = nn.MakemoreMLP(vocab=27, block=2, emb=4, hidden=8, dtype=bt.float32)
    opt = SGD(m.parameters(), lr=0.1)
    batch = [([1, 2], 0), ([3, 4], 1), ([5, 6], 2), ([7, 8], 3)]
    opt.fused_step(m, batch, chunk=2, threads=2, compile=True)  # traced while finite
    m.fc2.bias.set_data([float("inf")] + [0.0] * 26)
    before, steps = _params(m), opt.state.steps
    m.parameter_vector().set_grad(np.full(m.parameter_vector().size, 3.0))
    with pytest.raises(FloatingPointError):
        opt.fused_step(m, batch, chunk=2, threads=2, compile=True)
    after = _params(m)
    for k in before:
        assert np.array_equal(before[k], after[k], equal_nan=True), k
    assert np.array_equal(m.parameter_vector().numpy("grads"), np.full(m.parameter_vector().size, 3.0))
    assert opt.state.steps == steps


def _spy_paths(monkeypatch):
    """Wraps every path of burtorch.optim.fused so a test sees which ones a step ran, in order."""
    from burtorch.optim import fused

    ran = []
    for name, run in list(fused._RUN.items()):
        def spy(*args, _name=name, _run=run):
            ran.append(_name)
            return _run(*args)
        monkeypatch.setitem(fused._RUN, name, spy)
    return ran


def test_the_path_is_chosen_in_one_place(monkeypatch):
    from burtorch.optim import fused

    m = nn.MakemoreMLP(vocab=27, block=2, emb=4, hidden=8, dtype=bt.float32)
    batch = [([1, 2], 0), ([3, 4], 1), ([5, 6], 2), ([7, 8], 3)]
    plain, momentum = SGD(m.parameters(), lr=0.1), SGD(m.parameters(), lr=0.1, momentum=0.9)
    assert fused.plan(momentum, m, batch, chunk=4) == (fused.UNFUSED,)
    assert fused.plan(plain, m, batch, chunk=2) == (fused.UNFUSED,)  # several graphs, not compiled
    assert fused.plan(plain, m, batch[:1]) == (fused.EAGER,)
    assert fused.plan(plain, m, batch, chunk=4) == (fused.EAGER,)
    assert fused.plan(plain, m, batch, chunk=4, compile=True) == (fused.COMPILED, fused.EAGER)
    assert fused.plan(plain, m, batch, chunk=2, compile=True, threads=1) == (fused.UNFUSED,)
    assert fused.plan(plain, m, batch, loss_fn=lambda mod, s: mod.loss(*s), chunk=4) == (fused.UNFUSED,)
    with pytest.raises(ValueError, match="threads"):
        fused.plan(plain, m, batch, chunk=4, threads=0)  # a fused path checks its thread count
    # fused_step follows the plan: a tuple cannot replay, so the compiled path declines it and the
    # eager one takes the step
    ran = _spy_paths(monkeypatch)
    plain.fused_step(m, tuple(batch), chunk=4, compile=True)
    assert ran == [fused.COMPILED, fused.EAGER] and plain.fused_weights == _linears(m)
    ran.clear()
    plain.fused_step(m, batch, chunk=4, compile=True)
    assert ran == [fused.COMPILED] and plain.fused_weights == _linears(m)
    ran.clear()
    momentum.fused_step(m, batch, chunk=4)
    assert ran == [fused.UNFUSED] and momentum.fused_weights == 0


@needs_two
def test_the_chunks_path_comes_first_on_two_threads(monkeypatch):
    from burtorch.optim import fused

    m = nn.MakemoreMLP(vocab=27, block=2, emb=4, hidden=8, dtype=bt.float32)
    opt = SGD(m.parameters(), lr=0.1)
    batch = [([1, 2], 0), ([3, 4], 1), ([5, 6], 2), ([7, 8], 3)]
    assert fused.plan(opt, m, batch, chunk=2, compile=True, threads=2) == (fused.CHUNKS, fused.UNFUSED)
    ran = _spy_paths(monkeypatch)
    opt.fused_step(m, batch, chunk=2, compile=True, threads=2)
    assert ran == [fused.CHUNKS] and opt.fused_weights == 0
