"""The shape of a sample of id parts (the key of its compiled program) comes from the native rule
the replays read samples with: the oracle and the replay can never disagree on it."""
import pytest

import burtorch as bt
from burtorch import _core
from burtorch.oracle_compiled import _shape


class Index:
    """An id that is not an int: has __index__, is no sequence."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


def test_kinds_of_parts():
    np = pytest.importorskip("numpy")
    assert _shape((3, [1, 2], (4,))) == (0, 2, 1)
    assert _shape([np.int64(2), np.array([1, 2, 3]), Index(1), True, range(4)]) == (0, 3, 0, 0, 4)
    assert _shape(()) == ()


def test_bad_samples_raise_type_error():
    with pytest.raises(TypeError, match="sequence of id parts"):
        _core._sample_shape(3)
    with pytest.raises(TypeError):
        _core._sample_shape((1.5,))


def test_a_replay_reads_what_the_shape_says():
    """Samples whose parts are of every kind replay under the program of their shape, with the
    losses of the same samples computed eagerly."""
    np = pytest.importorskip("numpy")
    from burtorch.program import traced_ids

    arena = bt.Arena(bt.float64)
    with arena:
        table = bt.leaves([[0.1 * i + 0.01 * j for j in range(3)] for i in range(5)])

    def f(ids, target):
        return bt.cross_entropy(bt.embedding(table, ids).reshape(1, 6), target)

    samples = [([1, 3], 2), ((0, 4), np.int64(1)), [np.array([2, 2]), Index(0)]]
    assert {_shape(s) for s in samples} == {(2, 0)}
    with arena:
        eager = [f([int(i) for i in ids], int(t)).data for ids, t in samples]
        cp = arena.checkpoint()
        _core._trace_begin(arena, 3)
        try:
            prog = _core._trace_end(f(traced_ids([0, 0], 0), traced_ids(0, 2)), [], [table])
        finally:
            _core._trace_abort()
            arena.rewind(cp)
    values = np.zeros(3)
    stop, failed = prog._replay_samples(samples, 0, list(_shape(samples[0])), "values", 1.0, values)
    assert (stop, failed) == (3, [])
    assert values.tolist() == eager
