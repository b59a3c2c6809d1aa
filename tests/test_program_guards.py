"""Trace rules: comparisons are guards (a failed guard re-traces, never answers from the old
program); number reads, backward and no_grad inside a trace raise naming the line; bad input to a
replay is a clear exception."""
import numpy as np
import pytest

import burtorch as bt


def branchy(a, b):
    if a > b:  # a guard: replays check it and re-trace where it comes out differently
        return a * b
    return a - b


def eager_branchy(a0, b0):
    cp = bt.checkpoint()
    a, b = bt.Value(a0), bt.Value(b0)
    y = branchy(a, b)
    y.backward()
    out = (y.data, (a.grad, b.grad))
    bt.rewind(cp)
    return out


def test_failed_guard_retraces_on_call():
    f = bt.value_and_grad(branchy, argnums=(0, 1))
    assert f(3.0, 1.0) == eager_branchy(3.0, 1.0) == (3.0, (1.0, 3.0))
    (prog,) = f.programs()
    assert len(prog.guards) == 1 and prog.guards[0][0].endswith("test_program_guards.py:11")
    assert f(1.0, 3.0) == eager_branchy(1.0, 3.0) == (-2.0, (1.0, -1.0))  # the other branch
    assert f.traces == 2 and len(f.programs()) == 2
    assert f(5.0, 2.0) == eager_branchy(5.0, 2.0) and f.traces == 2  # both variants kept


def test_map_flags_failed_guards_and_recomputes_them():
    f = bt.value_and_grad(branchy, argnums=(0, 1))
    X = np.random.default_rng(0).normal(size=(40, 2))
    values, grads = f.map(X)
    for i, (a, b) in enumerate(X):
        v, g = eager_branchy(a, b)
        assert values[i] == v and tuple(grads[i]) == g


def test_bool_and_number_on_the_left_are_guards():
    def fn(x):
        y = x * 2.0
        if 1.0 < y:
            y = y * y
        if y:
            y = y + 1.0
        return y
    f = bt.value_and_grad(fn)
    for x in (2.0, 0.1, 0.0, -3.0, 0.7):
        cp = bt.checkpoint()
        v = bt.Value(x)
        r = fn(v)
        r.backward()
        assert f(x) == (r.data, v.grad)
        bt.rewind(cp)


@pytest.mark.parametrize("read", [
    lambda v: float(v), lambda v: v.data, lambda v: v.item(), lambda v: bt.vector([v, v]).tolist(),
    lambda v: bt.vector([v]).numpy(), lambda v: v.backward()])
def test_reading_numbers_while_tracing_raises_naming_the_line(read):
    def fn(x):
        y = x * 3.0
        read(y)
        return y
    with pytest.raises(bt.TraceError, match=r"test_program_guards.py:\d+"):
        bt.value_and_grad(fn)(1.0)
    assert not bt._core.is_tracing()
    assert bt.Value(2.0).data == 2.0  # reads work again after the failed trace


def test_no_grad_and_traced_id_misuse_raise():
    def fn(x):
        with bt.no_grad():
            return x * 2.0
    with pytest.raises(ValueError, match="no_grad"):
        bt.value_and_grad(fn)(1.0)
    E = bt.leaves([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(bt.TraceError, match="traced id"):
        bt.value_and_grad(lambda x, i: bt.vsum(bt.embedding(E, [i])) * x * (i + 1), ids=(1,))(1.0, 1)
    with pytest.raises(bt.TraceError, match="traced id"):
        bt.value_and_grad(lambda x, i: x * [1.0, 2.0][i], ids=(1,))(1.0, 1)


def test_bad_input():
    f = bt.value_and_grad(lambda a, b: a * b + b, argnums=(0, 1))
    f(1.0, 2.0)
    with pytest.raises(ValueError, match="2 float inputs"):
        f.programs()[0]._replay(np.zeros((3, 3)), np.zeros((3, 0), np.int64), "rows", 1.0, None, np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"\(N, k\)"):
        f.map(np.zeros((2, 2, 2)))
    with pytest.raises(TypeError, match="real numbers"):
        f.map(np.array([["a", "b"]]))
    with pytest.raises(TypeError, match="float"):
        f("x", 2.0)
    with pytest.raises(ValueError, match="not finite"):
        f.map(np.array([[1.0, np.nan]]))
    with pytest.raises(TypeError, match="argnums"):
        bt.value_and_grad(lambda a: a, argnums=3)(1.0)
    with pytest.raises(TypeError, match="scalar Value"):
        bt.value_and_grad(lambda a: 3.0)(1.0)
    with pytest.raises(TypeError, match="integer"):
        bt.value_and_grad(lambda x, i: x, ids=(1,)).map(np.ones(2), ids=[np.ones(2)])


def test_program_after_its_parameters_were_rewound_raises():
    cp = bt.checkpoint()
    w = bt.Value(3.0)
    prog = bt.trace(lambda x: x * w, [2.0])
    X, ids = np.array([[2.0]]), np.zeros((1, 0), np.int64)
    out = np.empty((1, 1))
    prog._replay(X, ids, "rows", 1.0, None, out)
    assert out[0, 0] == 3.0 and prog.alive
    bt.rewind(cp)
    bt.Value(7.0)  # the slot is reused by another node
    assert not prog.alive
    with pytest.raises(bt.StaleValueError, match="rewind"):
        prog._replay(X, ids, "rows", 1.0, None, out)


def test_parameters_are_read_at_each_call():
    w = bt.Value(3.0)
    f = bt.value_and_grad(lambda x: x * w)
    assert f(2.0) == (6.0, 3.0)
    w.data = 5.0
    assert f(2.0) == (10.0, 5.0) and f.traces == 1


def test_replay_takes_any_buffer():
    from array import array
    f = bt.value_and_grad(lambda a, b: a * b + b, argnums=(0, 1))
    f(1.0, 2.0)
    prog = f.programs()[0]
    X = np.array([[1.5, -2.0], [0.25, 3.0]])
    ref_v, ref_g = np.empty(2), np.empty((2, 2))
    prog._replay(X, None, "rows", 1.0, ref_v, ref_g)
    xs = array("d", X.ravel().tolist())
    v, g = array("d", [0.0]) * 2, array("d", [0.0]) * 4
    prog._replay(memoryview(xs).cast("B").cast("d", (2, 2)), None, "rows", 1.0, v, g)
    assert list(v) == ref_v.tolist() and list(g) == ref_g.ravel().tolist()
    prog._replay(X.astype(np.float32), None, "rows", 1.0, v, g)  # float32 inputs are widened
    assert list(v) == [float(np.float32(1.5)) * -2.0 + -2.0, 0.25 * 3.0 + 3.0]
    with pytest.raises(TypeError, match="buffer"):
        prog._replay([[1.0, 2.0]], None, "rows", 1.0, v, g)
    with pytest.raises(TypeError, match="format"):
        prog._replay(np.array([[1 + 2j, 2]]), None, "rows", 1.0, v, g)
    with pytest.raises(ValueError, match="2-D"):
        prog._replay(np.zeros(2), None, "rows", 1.0, v, g)
    with pytest.raises(ValueError, match="mode"):
        prog._replay(X, None, "everything", 1.0, v, g)
