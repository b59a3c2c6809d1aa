"""Arena semantics: checkpoint/rewind, stale handles, gradient accumulation, partial sweeps."""
import threading

import pytest

import burtorch as bt


def test_checkpoint_rewind_truncates_and_reuses_slots():
    arena = bt.Arena()
    with arena:
        p = bt.Value(3.0)
        cp = arena.checkpoint()
        x = p * 2
        first = x.index
        assert arena.num_nodes == 2 and arena.num_records == 1
        bt.rewind(cp)
        assert arena.num_nodes == 1 and arena.num_records == 0
        y = p * 5
        assert y.index == first  # the slot is reused...
        with pytest.raises(bt.StaleValueError):
            x.data  # ...and the old handle knows it is not its node any more
        assert not x.alive and y.alive and p.alive
        assert "stale" in repr(x)


def test_stale_handle_in_every_entry_point():
    arena = bt.Arena()
    with arena:
        cp = arena.checkpoint()
        x = bt.Value(1.0)
        arena.rewind(cp)
        for use in [lambda: x + 1, lambda: 1 + x, lambda: x * x, lambda: -x, lambda: x.relu(),
                    lambda: x.backward(), lambda: x.grad, lambda: bt.reduce_sum([x]),
                    lambda: float(x), lambda: setattr(x, "data", 2.0), lambda: x.children,
                    lambda: bt.inner_product([x], [x])]:
            with pytest.raises(bt.StaleValueError):
                use()


def test_rewind_to_discarded_or_foreign_checkpoint():
    a, b = bt.Arena(), bt.Arena()
    with a:
        bt.Value(1.0)
        cp0 = a.checkpoint()
        bt.Value(2.0)
        cp1 = a.checkpoint()
        a.rewind(cp0)
        bt.Value(3.0)  # regrow to the same size: cp1 must still be recognised as discarded
        with pytest.raises(ValueError, match="discarded"):
            a.rewind(cp1)
        assert a.num_nodes == 2  # unchanged by the refused rewind
    with pytest.raises(ValueError, match="another arena"):
        b.rewind(cp0)


def test_scope_and_module_checkpoint_cover_both_dtypes():
    a64, a32 = bt.current_arena(bt.float64), bt.current_arena(bt.float32)
    n64, n32 = a64.num_nodes, a32.num_nodes
    with bt.scope():
        bt.Value(1.0) * 2
        bt.Value(1.0, dtype=bt.float32) * 2
        assert a64.num_nodes == n64 + 2 and a32.num_nodes == n32 + 2
    assert a64.num_nodes == n64 and a32.num_nodes == n32


def test_leaf_grads_accumulate_interior_grads_reset():
    with bt.scope():
        a = bt.Value(2.0)
        b = a * 3
        c = b * b  # 9 a^2
        c.backward()
        assert a.grad == 36.0 and b.grad == 12.0
        c.backward()  # leaves accumulate, interior nodes hold dc/dnode again
        assert a.grad == 72.0 and b.grad == 12.0
        a.zero_grad()
        c.backward(seed=0.5)
        assert a.grad == 18.0 and b.grad == 6.0


def test_backward_from_an_earlier_node_after_a_later_one():
    with bt.scope():
        a = bt.Value(2.0)
        b = a * a
        c = b * 3
        c.backward()
        assert b.grad == 3.0
        a.zero_grad()
        b.backward()
        assert b.grad == 1.0 and a.grad == 4.0


def test_backward_of_a_leaf():
    with bt.scope():
        a = bt.Value(2.0)
        a.backward()
        assert a.grad == 1.0


def test_partial_gradient_early_exit():
    arena = bt.Arena()
    with arena:
        early = bt.Value(1.5)
        h = early
        for _ in range(50):
            h = h * 1.01  # records the partial sweep can skip
        late = bt.Value(2.0)
        y = h * late + late * late
        y.backward(wrt=[late])
        assert late.grad == pytest.approx(h.data + 4.0)
        assert early.grad == 0.0  # below the stop: not swept
        y.backward()  # a full sweep reaches it
        assert early.grad == pytest.approx(2.0 * 1.01 ** 50)


def test_labels_given_are_always_stored_and_cost_nothing_otherwise():
    arena = bt.Arena()
    with arena:
        with bt.labels(False):  # labels off stop no label given explicitly
            x = bt.Value(1.0, label="x")
            assert x.label == "x" and arena.stats()["labels"] == 1
            x.label = "x2"
            assert x.label == "x2" and arena.stats()["labels"] == 1
            u = x * 2.0  # no label given: none stored
            assert u.label is None and arena.stats()["labels"] == 1
        with bt.labels(True):
            y = bt.Value(2.0, label="y")
            z = x * y
            z.label = "z"
            assert y.label == "y" and z.label == "z"
            assert "label='z'" in repr(z)
            assert arena.stats()["labels"] == 3
            cp = arena.checkpoint()
            w = z + 1
            w.label = "w"
            arena.rewind(cp)
            assert arena.stats()["labels"] == 3  # labels of rewound nodes go with them
        x.label = None  # taken back
        assert x.label is None and arena.stats()["labels"] == 2
        assert not bt.labels.enabled()


def test_stats_counts_bytes():
    arena = bt.Arena(bt.float32)
    with arena:
        xs = [bt.Value(float(i), dtype=bt.float32) for i in range(100)]
        bt.reduce_sum(xs)
        s = arena.stats()
        assert s["nodes"] == 101 and s["records"] == 1 and s["args"] == 100
        assert s["bytes"]["values"] == 404 and s["bytes"]["records"] == 32
        assert s["bytes_committed"] >= s["bytes_in_use"]


def test_explicit_arena_and_value_arena_argument():
    arena = bt.Arena(bt.float32)
    x = bt.Value(1.0, arena=arena)
    assert x.dtype == bt.float32 and x.arena is arena
    with pytest.raises(TypeError, match="dtype"):
        bt.Value(1.0, dtype=bt.float64, arena=arena)


def test_capacity_exceeded_is_a_memory_error():
    arena = bt.Arena(capacity=100)
    with arena:
        xs = [bt.Value(1.0) for _ in range(100)]
        with pytest.raises(MemoryError, match="capacity"):
            bt.Value(1.0)
        assert arena.num_nodes == 100 and xs[0].data == 1.0
    small = bt.Arena(capacity=10)  # records run out first: the op must not leave a half node
    with small:
        x = bt.Value(1.0)
        for _ in range(9):
            x = x + 1
        with pytest.raises(MemoryError):
            x * 2
        assert small.num_nodes == 10 and small.num_records == 9


def test_threads_get_their_own_default_arena():
    main_arena = bt.current_arena()
    seen = {}

    def work():
        seen["arena"] = bt.current_arena()
        a, b = bt.Value(3.0), bt.Value(4.0)
        c = a * b
        c.backward()
        seen["grads"] = (a.grad, b.grad)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen["arena"] is not main_arena
    assert seen["grads"] == (4.0, 3.0)


def test_numpy_views_are_zero_copy():
    np = pytest.importorskip("numpy")
    arena = bt.Arena()
    with arena:
        xs = [bt.Value(float(i)) for i in range(5)]
        v = arena.numpy(0, 5)
        assert v.tolist() == [0, 1, 2, 3, 4] and v.dtype == np.float64
        with pytest.raises(ValueError):
            v[0] = 9.0  # read-only by default
        w = arena.numpy(0, 5, writable=True)
        w[1] = 7.0
        assert xs[1].data == 7.0
        with pytest.raises(IndexError):
            arena.numpy(0, 6)


def test_default_dtype():
    assert bt.get_default_dtype() == bt.float64
    try:
        bt.set_default_dtype(bt.float32)
        assert bt.Value(1.0).dtype == bt.float32
        assert bt.leaves([1.0, 2.0]).dtype == bt.float32
        assert bt.reduce_sum([1.0, 2.0]).dtype == bt.float32
        with pytest.raises(TypeError):
            bt.set_default_dtype("int32")
    finally:
        bt.set_default_dtype("float64")
    assert bt.Value(1.0).dtype == bt.float64


def test_records_name_their_op():
    arena = bt.Arena()
    with arena:
        x = bt.leaves([1.0, 2.0])
        t = x.tanh()
        s = t + x
        y = bt.vsum(s)
        names = [arena.record(r)[0] for r in range(arena.num_records)]
        assert names == ["map_unary:tanh", "map_binary:add", "sum_range"]
        assert y.op == "sum_range" and t[0].op == "map_unary"
        assert arena.record(0)[3] == [(0, 2)]  # argument spans
