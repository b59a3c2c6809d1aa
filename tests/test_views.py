"""burtorch.views: zero-copy numpy arrays over nodes, and bulk loading."""
import gc

import pytest

np = pytest.importorskip("numpy")

import burtorch as bt  # noqa: E402
from burtorch.views import load_array, numpy_view  # noqa: E402


class View:
    def __init__(self, arena, spans):
        self.arena, self.spans = arena, spans


@pytest.fixture(params=["float32", "float64"])
def nodes(request):
    arena = bt.Arena(getattr(bt, request.param))
    vals = [bt.Value(float(i), arena=arena) for i in range(8)]
    return arena, vals


def test_range_view_is_zero_copy_and_read_only(nodes):
    arena, vals = nodes
    view = numpy_view((arena, 2, 6))
    assert view.dtype == np.dtype(arena.dtype.name) and view.tolist() == [2.0, 3.0, 4.0, 5.0]
    vals[3].data = 30.0
    assert view[1] == 30.0  # sees the arena, no copy
    with pytest.raises(ValueError):
        view[0] = 1.0


def test_writable_view_writes_through(nodes):
    arena, vals = nodes
    grads = numpy_view(View(arena, [(0, 8)]), what="grads", writable=True)
    grads[:] = 0.5
    assert [v.grad for v in vals] == [0.5] * 8
    values = numpy_view(vals[4], writable=True)
    values[0] = -1.0
    assert vals[4].data == -1.0


def test_contiguous_values_list_is_one_view(nodes):
    arena, vals = nodes
    view = numpy_view(vals[1:5])
    vals[2].data = 99.0
    assert view[1] == 99.0


def test_several_spans_need_copy(nodes):
    arena, vals = nodes
    scattered = View(arena, [(0, 2), (5, 2)])
    with pytest.raises(ValueError, match="copy=True"):
        numpy_view(scattered)
    copied = numpy_view(scattered, copy=True)
    assert copied.tolist() == [0.0, 1.0, 5.0, 6.0]
    copied[0] = 7.0
    assert vals[0].data == 0.0  # a copy, not linked
    assert numpy_view([vals[7], vals[0]], copy=True).tolist() == [7.0, 0.0]


def test_view_keeps_the_arena_alive():
    arena = bt.Arena(bt.float64)
    kept = [bt.Value(float(i) * 2, arena=arena) for i in range(5)]  # dropped nodes would be reclaimed
    view = numpy_view((arena, 0, 5))
    del arena
    gc.collect()
    assert view.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    del kept
    assert view.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]  # the view pins what it shows


def test_load_array_in_bulk(nodes):
    arena, vals = nodes
    load_array(View(arena, [(0, 3), (6, 2)]), np.arange(10, 15, dtype=np.int64))
    assert [v.data for v in vals] == [10.0, 11.0, 12.0, 3.0, 4.0, 5.0, 13.0, 14.0]
    load_array((arena, 0, 8), [0.25] * 8, what="grads")
    assert [v.grad for v in vals] == [0.25] * 8
    before = arena.read_bytes(0, 8, "values")
    with pytest.raises(ValueError, match="3 numbers for 2 nodes"):
        load_array(vals[:2], [1.0, 2.0, 3.0])
    assert arena.read_bytes(0, 8, "values") == before


def test_bad_input(nodes):
    arena, vals = nodes
    with pytest.raises(ValueError, match="what"):
        numpy_view(vals[0], what="both")
    with pytest.raises(IndexError):
        numpy_view((arena, 3, 99))
    with pytest.raises(TypeError):
        numpy_view(3.0)
    cp = arena.checkpoint()
    gone = bt.Value(1.0, arena=arena)
    arena.rewind(cp)
    bt.Value(2.0, arena=arena)
    with pytest.raises(bt.StaleValueError):
        numpy_view(gone)
    with pytest.raises(bt.StaleValueError):
        load_array([vals[0], gone], [1.0, 2.0])
    other = bt.Value(1.0, arena=bt.Arena(arena.dtype))
    with pytest.raises(ValueError, match="different arenas"):
        numpy_view([vals[0], other], copy=True)


def test_real_vectors():
    arena = bt.Arena(bt.float64)
    with arena:
        W = bt.leaves([float(i) for i in range(6)], shape=(2, 3))
    rows = numpy_view(W, writable=True)
    assert rows.shape == (2, 3) == W.numpy().shape  # a view keeps its Vector's shape
    rows[0, 0] = 42.0
    assert W.data[0] == 42.0
    assert rows[1].tolist() == [3.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="copy=True"):
        numpy_view(W.columns(0, 2))
    assert numpy_view(W.columns(0, 2), copy=True).tolist() == [[42.0, 1.0], [3.0, 4.0]]
    load_array(W.columns(2, 3), [7.0, 8.0])
    assert W.data == [42.0, 1.0, 7.0, 3.0, 4.0, 8.0]
    assert rows[:, 2].tolist() == [7.0, 8.0]  # still the arena's slots
    assert numpy_view(W, what="grads").shape == (2, 3)
    with arena:
        v = bt.leaves([1.0, 2.0, 3.0, 4.0])
        wide = bt.leaves([0.0] * 8, shape=(4, 2))
    assert numpy_view(v).shape == (4,)  # a 1-D Vector stays 1-D
    assert numpy_view(wide).shape == (4, 2) and numpy_view(wide[1:3]).shape == (2, 2)
    assert numpy_view([v, W], copy=True).shape == (10,)  # a list of Vectors is one flat selection
