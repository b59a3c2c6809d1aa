"""Inside `with arena:` what is made with no dtype or arena lands in that arena (the innermost
entered on this thread, any dtype), and get_default_dtype() is its dtype; outside, the dtype
set_default_dtype set. Labels given explicitly are always stored."""
import threading

import pytest

import burtorch as bt


@pytest.fixture(autouse=True)
def _restore_default_dtype():
    yield
    bt.set_default_dtype(bt.float64)


def test_value_leaves_and_scalar_ops_follow_the_entered_arena():
    a32 = bt.Arena(bt.float32)
    assert bt.get_default_dtype() == bt.float64
    with a32:
        assert bt.get_default_dtype() == bt.float32
        v = bt.Value(1.0)
        assert v.arena is a32 and v.dtype == bt.float32
        w = v * 3 + 1  # a scalar op between a bare Value and numbers
        r = 2 - v
        assert w.arena is a32 and r.arena is a32 and w.dtype == bt.float32
        x = bt.leaves([1.0, 2.0])
        assert x.arena is a32 and x.dtype == bt.float32
        y = bt.vector([v, 5.0])  # the number becomes a constant of v's arena
        assert y.arena is a32
        s = bt.vsum([1.0, 2.0, 3.0])  # numbers alone: a constant vector of the entered arena
        assert s.arena is a32
    assert bt.get_default_dtype() == bt.float64
    assert bt.Value(1.0).dtype == bt.float64


def test_explicit_dtype_or_arena_wins():
    a32, b64 = bt.Arena(bt.float32), bt.Arena(bt.float64)
    with a32:
        assert bt.Value(1.0, dtype=bt.float64).dtype == bt.float64
        assert bt.Value(1.0, arena=b64).arena is b64
        assert bt.leaves([1.0], dtype="float64").dtype == bt.float64
    assert bt.current_arena() is not a32


def test_nesting_the_innermost_decides():
    a32, b64, c32 = bt.Arena(bt.float32), bt.Arena(bt.float64), bt.Arena(bt.float32)
    with a32:
        with b64:
            assert bt.get_default_dtype() == bt.float64
            assert bt.Value(1.0).arena is b64
            with c32:
                assert bt.get_default_dtype() == bt.float32
                assert bt.Value(1.0).arena is c32
                assert bt.current_arena() is c32
            assert bt.Value(1.0).arena is b64
        assert bt.Value(1.0).arena is a32
        assert bt.current_arena() is a32


def test_set_default_dtype_applies_outside_any_block():
    bt.set_default_dtype(bt.float32)
    assert bt.get_default_dtype() == bt.float32
    b64 = bt.Arena(bt.float64)
    with b64:
        assert bt.get_default_dtype() == bt.float64
        assert bt.Value(1.0).arena is b64
    assert bt.get_default_dtype() == bt.float32
    assert bt.Value(1.0).dtype == bt.float32


def test_an_exception_inside_the_block_leaves_it():
    a32 = bt.Arena(bt.float32)
    with pytest.raises(KeyError):
        with a32:
            bt.Value(1.0)
            raise KeyError("inside")
    assert bt.get_default_dtype() == bt.float64
    v = bt.Value(1.0)
    assert v.arena is not a32 and v.dtype == bt.float64


def test_another_thread_is_unaffected():
    a32 = bt.Arena(bt.float32)
    seen = {}
    entered, checked = threading.Event(), threading.Event()

    def other():
        entered.wait(10)
        seen["dtype"] = bt.get_default_dtype()
        v = bt.Value(1.0)
        seen["arena"], seen["vdtype"] = v.arena, v.dtype
        checked.set()

    t = threading.Thread(target=other)
    t.start()
    with a32:
        entered.set()
        checked.wait(10)
        assert bt.Value(1.0).arena is a32
    t.join(10)
    assert seen["dtype"] == bt.float64 and seen["vdtype"] == bt.float64 and seen["arena"] is not a32


def test_labels_given_are_stored_with_labels_off():
    arena = bt.Arena(bt.float64)
    assert not bt.labels.enabled()
    with arena:
        b = bt.Value(1.0, label="b")
        c = b + 1
        c.label = "c"
        assert b.label == "b" and c.label == "c"
        assert (b * 2).label is None
    assert arena.stats()["labels"] == 2
