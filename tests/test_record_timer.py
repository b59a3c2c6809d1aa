"""bt.record_times(): each range record's calls and wall time, forward and backward apart, in
eager graphs, sweeps and compiled replays, counted only inside the block."""
import random

import pytest

import burtorch as bt
from burtorch import _core, nn
from burtorch.optim import SGD
from lookup_models import TwoRecordMLP


def _calls(rt):
    return {(r.op, r.direction): r.calls for r in rt.rows}


def _w4_batches(r, b, steps):
    return [[([r.randrange(27) for _ in range(16)], r.randrange(27)) for _ in range(b)] for _ in range(steps)]


def test_an_eager_graph_counts_each_record_once_each_way():
    W = bt.leaves([[0.1 * (i - j) for j in range(5)] for i in range(3)], dtype=bt.float64)
    b = bt.leaves([0.0, 0.1, 0.2], dtype=bt.float64)
    with bt.record_times() as rt:
        y = bt.linear([1.0, 2.0, 3.0, 4.0, 5.0], W, b)
        loss = _core.cross_entropy(y.reshape(1, 3), [2])
        loss.backward()
    assert _calls(rt) == {("linear", "forward"): 1, ("linear", "backward"): 1,
                          ("cross_entropy", "forward"): 1, ("cross_entropy", "backward"): 1}
    assert all(r.seconds > 0 for r in rt.rows)
    assert 0 < rt.in_records <= rt.wall
    assert rt.outside == pytest.approx(rt.wall - sum(r.seconds for r in rt.rows))


def test_nothing_is_counted_outside_a_block_and_each_block_starts_from_zero():
    W = bt.leaves([[0.5, -0.5], [0.25, 1.0]], dtype=bt.float64)
    bt.linear([1.0, 2.0], W).sum().backward()  # before any block: not counted anywhere
    with bt.record_times() as first:
        for _ in range(3):
            bt.linear([1.0, 2.0], W)
    bt.linear([1.0, 2.0], W)  # between blocks
    with bt.record_times() as second:
        bt.linear([1.0, 2.0], W)
    assert _calls(first) == {("linear", "forward"): 3}
    assert _calls(second) == {("linear", "forward"): 1}


def test_a_compiled_fused_step_times_its_replayed_records_on_one_and_two_threads():
    r = random.Random(0)
    bt.manual_seed(0)
    model = nn.MakemoreMLP.paper(hidden=64, vocab=27, dtype=bt.float32)
    opt = SGD(model.parameters(), lr=0.01)
    batches = _w4_batches(r, 64, 4)
    opt.fused_step(model, batches[0], chunk=64, compile=True, threads=1)  # traced here, replayed below
    thread_counts = (1, 2) if _core._allowed_cores() >= 2 else (1,)
    for threads in thread_counts:
        with bt.record_times() as rt:
            for batch in batches:
                opt.fused_step(model, batch, chunk=64, compile=True, threads=threads)
        steps = len(batches)
        # the step's records: the lookup with its layer and tanh, the second layer, the loss
        assert _calls(rt) == {(op, d): steps for op in ("lookup_linear", "linear", "cross_entropy")
                              for d in ("forward", "backward")}, threads
        assert rt.in_records <= rt.wall
        lines = rt.table(per=steps).splitlines()
        us = [float(line.split()[3]) for line in lines[1:-2]]
        assert us == sorted(us, reverse=True) and len(us) == len(rt.rows)  # slowest first
        slowest = max(rt.rows, key=lambda r: r.seconds)
        assert lines[1].split()[:2] == [slowest.op, slowest.direction]
        assert float(lines[1].split()[3]) == pytest.approx(1e6 * slowest.seconds / steps, abs=0.006)
        assert lines[-2].startswith("outside records") and lines[-1].startswith("wall")


def test_replays_on_several_threads_each_add_their_own_records():
    """A compiled oracle on two threads replays its blocks of samples on both: every sample's
    records are counted, whichever thread replayed them."""
    if _core._allowed_cores() < 2:
        pytest.skip("needs two cores")
    r = random.Random(1)
    bt.manual_seed(1)
    model = nn.MakemoreMLP(vocab=27, block=3, emb=4, hidden=8, dtype=bt.float64)
    batch = [([r.randrange(27) for _ in range(3)], r.randrange(27)) for _ in range(10)]
    bt.grad_oracle(model, batch, compile=True, threads=2)  # traced
    with bt.record_times() as rt:
        bt.grad_oracle(model, batch, compile=True, threads=2)
    calls = _calls(rt)
    assert calls[("cross_entropy", "forward")] == calls[("cross_entropy", "backward")] == len(batch)
    assert calls[("linear", "forward")] == 2 * len(batch)


def test_a_lookup_replayed_with_its_layer_is_one_row():
    if _core._allowed_cores() < 2:
        pytest.skip("needs two cores")
    r = random.Random(2)
    bt.manual_seed(2)
    model = TwoRecordMLP(vocab=27, block=16, emb=64, hidden=64, dtype=bt.float32)
    opt = SGD(model.parameters(), lr=0.01)
    batches = _w4_batches(r, 64, 3)
    opt.fused_step(model, batches[0], chunk=64, compile=True, threads=2)
    with bt.record_times() as rt:
        for batch in batches:
            opt.fused_step(model, batch, chunk=64, compile=True, threads=2)
    calls = _calls(rt)
    assert calls[("lookup+linear", "forward")] == calls[("lookup+linear", "backward")] == len(batches)
    assert calls[("linear", "forward")] == len(batches)  # the second layer alone
    assert ("gather", "forward") not in calls


def test_one_block_at_a_time_and_an_error_inside_ends_it():
    W = bt.leaves([[1.0, 2.0]], dtype=bt.float64)
    with bt.record_times() as outer:
        with pytest.raises(RuntimeError, match="already timing"):
            with bt.record_times():
                pass
        bt.linear([1.0, 1.0], W)  # the outer block still counts
    assert _calls(outer) == {("linear", "forward"): 1}
    with pytest.raises(ZeroDivisionError):
        with bt.record_times() as failed:
            bt.linear([1.0, 1.0], W)
            1 / 0  # noqa: B018
    assert _calls(failed) == {("linear", "forward"): 1} and failed.wall > 0
    with bt.record_times() as after:  # the error switched the timer off: a new block starts
        pass
    assert after.rows == []


@pytest.mark.parametrize("per", [0, -1, 1.5, True, "2"])
def test_table_wants_a_positive_int(per):
    with bt.record_times() as rt:
        pass
    with pytest.raises(ValueError, match="per"):
        rt.table(per=per)
