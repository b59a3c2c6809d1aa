"""Reliability of the core and its bindings, one class of failure per section: a clean Python
exception or a correct result, never a crash or a silently wrong number.
"""
import gc
import re
import threading
import warnings

import numpy as np
import pytest

import burtorch as bt


def tiny_arena(capacity, dtype=bt.float64):
    return bt.Arena(dtype, capacity=capacity)


# ---------------------------------------------------------------- capacity: MemoryError everywhere
CAPACITY_PATHS = {
    "value": lambda a, b, v: bt.Value(1.0),
    "binary": lambda a, b, v: a + b,
    "const_right": lambda a, b, v: a + 1.0,
    "const_left": lambda a, b, v: 2.0 * a,
    "func_with_constant": lambda a, b, v: bt.add(a, 1.0),
    "unary": lambda a, b, v: a.tanh(),
    "reduce_with_constant": lambda a, b, v: bt.reduce_sum([a, 1.0, 2.0]),
    "inner_with_bias_constant": lambda a, b, v: bt.inner_product_with_bias([a], [b], 0.5),
    "mean_and_mean_squares": lambda a, b, v: bt.reduce_mean_and_mean_squares([a, b]),
    "detach": lambda a, b, v: a.detach(),
    "leaves": lambda a, b, v: bt.leaves([1.0, 2.0, 3.0]),
    "map": lambda a, b, v: v.tanh(),
    "vector_plus_list": lambda a, b, v: v + [1.0, 2.0],
    "vsum": lambda a, b, v: bt.vsum(v),
    "linear_list_input": lambda a, b, v: bt.linear([1.0, 2.0], bt.leaves(shape=(3, 2))),
}


@pytest.mark.parametrize("path", sorted(CAPACITY_PATHS))
def test_a_full_arena_raises_memory_error_and_changes_nothing(path):
    arena = tiny_arena(8)
    with arena:
        a, b = bt.Value(1.0), bt.Value(2.0)
        v = bt.vector([a, b])
        filler = []  # held: dropped Values at the top would be reclaimed and never fill it
        while True:  # fill it up
            try:
                filler.append(bt.Value(0.0))
            except MemoryError:
                break
        before = (arena.num_nodes, arena.num_records, arena.num_args)
        with pytest.raises(MemoryError, match="capacity"):
            CAPACITY_PATHS[path](a, b, v)
        assert (arena.num_nodes, arena.num_records, arena.num_args) == before
        assert a.data == 1.0 and b.data == 2.0


def test_arena_capacity_arguments_are_checked():
    with pytest.raises(ValueError):
        bt.Arena(capacity=-1)
    with pytest.raises(ValueError):
        bt.Arena(capacity=2**31 + 1)


# ---------------------------------------------------------------- sizes beyond 32 bits
def test_linear_over_65536_rows_is_exact():
    W = bt.leaves([[2.0], [-1.0]])
    x = bt.leaves(np.arange(65536, dtype=np.float64).reshape(65536, 1))
    y = bt.linear(x, W)
    assert y.shape == (65536, 2)
    out = y.numpy()
    assert out[65535, 0] == 2 * 65535 and out[65535, 1] == -65535


def test_outputs_too_large_for_32_bit_counts_raise_memory_error():
    qkv = bt.leaves(shape=(65536, 3))  # one head, T = 65536: T*T weights overflow 32 bits
    n = bt.current_arena().num_nodes
    with pytest.raises(MemoryError):
        bt.multi_head_attention(qkv, heads=1)
    with pytest.raises(MemoryError):
        bt.attention(qkv.columns(0, 1), qkv.columns(1, 2), qkv.columns(2, 3))
    assert bt.current_arena().num_nodes == n


# ---------------------------------------------------------------- null and lifetime
@pytest.mark.parametrize("bad", [[None], [1.0, None], None, [], "ab"])
def test_cat_and_hcat_refuse_what_is_not_vectors(bad):
    for f in (bt.cat, bt.hcat):
        with pytest.raises((TypeError, ValueError)):
            f(bad)


def test_an_entered_arena_deleted_without_exit_stays_valid():
    a = bt.Arena()
    a.__enter__()
    del a
    gc.collect()
    v = bt.Value(3.0)  # goes to the entered arena, which the thread still holds
    assert (v * 2).data == 6.0
    v.arena.__exit__(None, None, None)


def test_misordered_exits_raise_and_leave_a_consistent_stack():
    outer = bt.current_arena()
    a, b = bt.Arena(), bt.Arena()
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match="order"):
        a.__exit__(None, None, None)
    assert bt.current_arena() is b
    b.__exit__(None, None, None)
    assert bt.current_arena() is outer
    with pytest.raises(RuntimeError, match="not entered"):
        b.__exit__(None, None, None)


def test_an_arena_exited_on_another_thread_raises_there():
    a = bt.Arena()
    a.__enter__()
    errors = []

    def exit_elsewhere():
        try:
            a.__exit__(None, None, None)
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=exit_elsewhere)
    t.start()
    t.join()
    assert errors and "not entered on this thread" in errors[0] and bt.current_arena() is a
    a.__exit__(None, None, None)


def test_generators_switching_arenas_never_touch_freed_arenas():
    def gen():
        with bt.Arena():
            yield bt.Value(1.0)
            yield bt.Value(2.0)

    g = gen()
    v = next(g)
    del g  # closing the generator runs its with-block's exit
    gc.collect()
    assert (v + 1).data == 2.0


# ---------------------------------------------------------------- checked paths everywhere
@pytest.mark.parametrize("ids", [7, -1, [1, 7], [1, -1], np.array([0, 3]), np.array([-2])])
def test_embedding_ids_out_of_range_raise_index_error(ids):
    table = bt.leaves(shape=(3, 4))
    with pytest.raises(IndexError, match="out of range"):
        bt.embedding(table, ids)


@pytest.mark.parametrize("ids", [1.0, [0.5], "a", [None], True, "value"])
def test_embedding_ids_of_wrong_type_raise_type_error(ids):
    if ids == "value":  # built here: a Value made at collection time would outlive the session
        ids = [bt.Value(1.0)]
    with pytest.raises(TypeError):
        bt.embedding(bt.leaves(shape=(3, 4)), ids)


def test_embedding_id_forms_agree():
    table = bt.leaves(np.arange(12.0).reshape(3, 4))
    forms = [2, [2], (2,), np.array([2]), np.array([2], dtype=np.int32), np.int64(2)]
    assert all(bt.embedding(table, f).data == [8.0, 9.0, 10.0, 11.0] for f in forms)


@pytest.mark.parametrize("targets", [5, -1, [0, 5], 0.0, "x"])
def test_cross_entropy_targets_are_checked(targets):
    logits = bt.leaves(shape=(2, 5)) if not isinstance(targets, int) else bt.leaves(shape=(1, 5))
    with pytest.raises((IndexError, TypeError, ValueError)):
        bt.cross_entropy(logits, targets)


# ---------------------------------------------------------------- convert first, check after
class RewindingNumber:
    """A number whose __float__ rewinds the arena and allocates: the classic check-then-convert trap."""

    def __init__(self, arena, cp, value=1.0):
        self.arena, self.cp, self.value = arena, cp, value
        self.kept = []

    def __float__(self):
        self.arena.rewind(self.cp)
        # reuses the slot of whatever was rewound (held: a dropped Value at the top is reclaimed)
        self.kept.append(bt.Value(-777.0, arena=self.arena))
        return self.value

    __index__ = None


TOCTOU_PATHS = {
    "set_data": lambda v, n: setattr(v, "data", n),
    "set_grad": lambda v, n: setattr(v, "grad", n),
    "binop": lambda v, n: v + n,
    "rbinop": lambda v, n: n * v,
    "reduce": lambda v, n: bt.reduce_sum([v, n]),
    "inner": lambda v, n: bt.inner_product([v], [n]),
    "inner_bias": lambda v, n: bt.inner_product_with_bias([v], [v], n),
    "func": lambda v, n: bt.mul(v, n),
    "backward_seed": lambda v, n: (v * 2).backward(n),
    "compare": lambda v, n: v < n,
    "vector_list": lambda v, n: bt.vector([v, n]),
    "vector_add": lambda v, n: bt.vector([v]) + [n],
    "leaky_relu": lambda v, n: v.leaky_relu(n),
}


@pytest.mark.parametrize("path", sorted(TOCTOU_PATHS))
def test_python_code_run_by_an_argument_cannot_redirect_a_write(path):
    arena = bt.Arena(bt.float64)
    with arena:
        keep = bt.Value(5.0, arena=arena)
        cp = arena.checkpoint()
        v = bt.Value(3.0, arena=arena)
        with pytest.raises(bt.StaleValueError):
            number = RewindingNumber(arena, cp)  # held, with the Value it allocates
            TOCTOU_PATHS[path](v, number)
        # whatever now lives in the rewound slot kept its value, and nothing else changed
        assert arena.value(cp.nodes).data == -777.0
        assert keep.data == 5.0 and keep.grad == 0.0


def test_nested_calls_from_an_argument_get_their_own_buffers():
    class NestedSum:
        def __float__(self):
            return bt.reduce_sum([bt.Value(10.0), bt.Value(20.0), bt.Value(30.0)]).data

    a, b = bt.Value(1.0), bt.Value(2.0)
    s = bt.reduce_sum([a, NestedSum(), b])
    assert s.data == 63.0
    s.backward()
    assert a.grad == 1.0 and b.grad == 1.0


def test_an_argument_raising_in_float_propagates_its_error():
    class Broken:
        def __float__(self):
            raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        bt.Value(1.0) + Broken()


def test_an_argument_that_empties_its_own_list_frees_nothing_the_op_still_reads():
    """__float__ clears the list it sits in, dropping the only references to the Values after it:
    the op reads the items as they were when it was called (the sanitizer build checks that no
    freed object is read)."""
    import gc

    class ClearsTheList:
        victim: list = []

        def __float__(self):
            self.victim.clear()
            gc.collect()
            return 1.0

    for n in (1, 5, 50):
        arg = ClearsTheList()
        items = [bt.Value(1.0), arg] + [bt.Value(float(i)) for i in range(n)]
        arg.victim = items
        s = bt.reduce_sum(items)
        assert s.data == 2.0 + sum(range(n))
        assert items == []


# ---------------------------------------------------------------- semantics the docs state
def test_interior_grads_are_reset_even_if_written_before_any_sweep():
    x = bt.Value(2.0)
    y = x * 3
    z = y * y
    y.grad = 5.0
    z.backward()
    assert y.grad == 12.0 and x.grad == 36.0


def test_interior_grads_written_through_a_vector_are_reset_too():
    x = bt.leaves([1.0, 2.0])
    h = x * 3.0
    loss = bt.vsum(h * h)
    h.set_grad([100.0, 100.0])
    loss.backward()
    assert h.grad == [6.0, 12.0] and x.grad == [18.0, 36.0]


def test_interior_grads_behind_a_writable_numpy_view_are_reset():
    x = bt.leaves([1.0, 2.0])
    h = x * 3.0
    loss = bt.vsum(h)
    view = h.numpy("grads", writable=True)
    view[:] = 50.0
    loss.backward()
    assert h.grad == [1.0, 1.0] and x.grad == [3.0, 3.0]


def test_zero_to_a_value_power_has_zero_gradient_as_documented():
    x = bt.Value(2.0)
    (0.0 ** x).backward()
    assert x.grad == 0.0
    v = bt.leaves([1.0, 3.0])
    bt.vsum(0.0 ** v).backward()
    assert v.grad == [0.0, 0.0]


def test_rewinding_many_times_keeps_dead_handles_dead():
    p = bt.Value(1.0)
    cp = bt.checkpoint()
    dead = bt.Value(2.0)
    for _ in range(1000):
        bt.rewind(cp)
        bt.Value(3.0)
    assert not dead.alive
    with pytest.raises(bt.StaleValueError):
        dead.data
    assert p.data == 1.0


def test_stale_vectors_are_refused_everywhere():
    cp = bt.checkpoint()
    v = bt.leaves([1.0, 2.0])
    bt.rewind(cp)
    bt.leaves([9.0, 9.0])
    for use in (lambda: v.data, lambda: v.numpy(), lambda: v.tanh(), lambda: bt.vsum(v), lambda: v[0],
                lambda: v.set_data([1, 2]), lambda: bt.cat([v]), lambda: v + 1.0):
        with pytest.raises(bt.StaleValueError):
            use()


# ---------------------------------------------------------------- sweeps bounded by what the root reaches
def test_a_loop_that_never_rewinds_sweeps_only_its_own_step():
    arena = bt.Arena()
    with arena:
        ws = bt.leaves(np.linspace(-1, 1, 20)).values()
        xs = list(np.linspace(0.5, -0.5, 20))
        reaches = []
        for _ in range(50):
            n0 = arena.num_records
            out = bt.reduce_sum([w * x for w, x in zip(ws, xs)]).tanh()
            out.backward()
            reaches.append(arena.reach(out) - n0)
        assert reaches == [0] * 50  # the sweep starts at this step's first record
        expected = (1 - np.tanh(sum(np.linspace(-1, 1, 20) * np.linspace(0.5, -0.5, 20))) ** 2)
        assert ws[0].grad == pytest.approx(50 * expected * 0.5)


def test_a_loop_that_never_rewinds_is_warned_about_once():
    arena = bt.Arena()
    with arena, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = bt.Value(0.5)
        x = bt.leaves(np.ones(4096))
        kept = []  # every step's output stays alive: memory really grows (reclamation cannot help)
        for _ in range(300):
            out = bt.vsum(x.tanh() * 2.0)  # few Python calls, many records per step
            for _ in range(4):
                out = out * w
            out.backward()
            kept.append(out)
    growth = [c for c in caught if "stays in memory" in str(c.message)]
    assert len(growth) == 1 and "bt.scope()" in str(growth[0].message)
    assert re.search(r"highest live node is node \d+ \(mul\) held by 1 Value", str(growth[0].message))


# ---------------------------------------------------------------- the idioms users bring
def test_ordering_comparisons_compare_data_and_equality_stays_identity():
    a, b = bt.Value(1.0), bt.Value(2.0)
    assert (a < b) is True and (b <= 2) is True and (3 > b) is True and (a >= 1.0) is True
    assert (a == bt.Value(1.0)) is False and a == a and len({a, b, a}) == 2
    assert bool(bt.Value(0.0)) is False and bool(b) is True
    with pytest.raises(TypeError):
        assert a < "x"


def test_leaves_keep_the_shape_of_nested_lists_and_2d_arrays():
    assert bt.leaves([[1, 2], [3, 4]]).shape == (2, 2)
    m = bt.leaves(np.arange(12.0).reshape(4, 3))
    assert m.shape == (4, 3) and m[1].data == [3.0, 4.0, 5.0]
    t = np.arange(12.0).reshape(3, 4).T  # not contiguous
    assert bt.leaves(t).numpy().tolist() == t.tolist()
    assert bt.leaves(np.arange(3)).data == [0.0, 1.0, 2.0]
    for bad, err in (([[1, 2], [3]], ValueError), (np.ones((2, 2, 2)), ValueError), ([[1, [2]]], TypeError),
                     (["a"], TypeError), ([bt.Value(1.0)], TypeError)):
        with pytest.raises(err):
            bt.leaves(bad)


def test_range_ops_and_modules_take_lists_and_arrays():
    from burtorch.nn import MLP

    bt.manual_seed(0)
    model = MLP(3, [4, 1], dtype=bt.float64)
    y = model([1.0, 2.0, 3.0])
    y2 = model(np.array([1.0, 2.0, 3.0]))
    assert y.shape == (1,) and y.item() == y2.item()
    loss = (y - 1.0) ** 2
    loss.backward()
    assert any(g != 0.0 for g in model.layers[0].weight.grad)
    assert bt.softmax([[1.0, 2.0], [3.0, 4.0]]).shape == (2, 2)
    assert bt.dot([1.0, 2.0], [3.0, 4.0]).data == 11.0


def test_no_grad_appends_values_only():
    a = bt.Value(2.0)
    W = bt.leaves([[1.0, 2.0]])
    arena = bt.current_arena()
    r0, n0 = arena.num_records, arena.num_args
    with bt.no_grad():
        assert not bt.is_grad_enabled()
        b = (a * 3 + 1).tanh()
        y = bt.linear([1.0, 1.0], W)
        with bt.no_grad():
            c = bt.reduce_sum([a, b])
        assert not bt.is_grad_enabled()
    assert bt.is_grad_enabled()
    assert (arena.num_records, arena.num_args) == (r0, n0)
    assert b.is_leaf and y.data == [3.0] and c.data == pytest.approx(2.0 + np.tanh(7.0))
    d = b * a  # b is a constant now
    d.backward()
    assert a.grad == b.data

    @bt.no_grad()
    def f(v):
        return v * v

    assert f(a).is_leaf and bt.is_grad_enabled()


def test_detect_anomaly_names_the_first_non_finite_record():
    with bt.labels(True):
        x = bt.Value(0.0, label="x")
        with bt.detect_anomaly():
            with pytest.raises(bt.AnomalyError, match=r"forward of log .* -inf .* 'x'"):
                x.log()
            assert bt.is_anomaly_enabled()
        y = x.sqrt() * 2.0
        with bt.detect_anomaly(), pytest.raises(FloatingPointError, match=r"backward of sqrt .* inf .* 'x'"):
            y.backward()
        assert not bt.is_anomaly_enabled()
        x.log().backward()  # off: IEEE numbers, no error
        assert x.grad == float("inf")
