"""Bad input gets a clear Python exception, never a crash."""
import math

import pytest

import burtorch as bt


@pytest.mark.parametrize("bad", ["1", None, [1.0], 1 + 2j, object()])
def test_non_numeric_operands(bad):
    x = bt.Value(1.0)
    for op in [lambda: x + bad, lambda: bad + x, lambda: x * bad, lambda: x / bad,
               lambda: x ** bad, lambda: bad - x]:
        with pytest.raises(TypeError):
            op()
    with pytest.raises(TypeError):
        bt.Value(bad)


def test_dtype_mix_is_a_type_error():
    a, b = bt.Value(1.0), bt.Value(1.0, dtype=bt.float32)
    with pytest.raises(TypeError, match="float32.*float64|float64.*float32"):
        a + b
    with pytest.raises(TypeError):
        bt.reduce_sum([a, b])
    with pytest.raises(TypeError):
        bt.inner_product([a], [b])


def test_errors_name_labelled_nodes():
    with bt.labels(True):
        a = bt.Value(1.0, label="weight")
        b = bt.Value(1.0, dtype=bt.float32, label="bias")
        with pytest.raises(TypeError, match="'weight' \\(slot \\d+\\).*'bias'"):
            a + b


def test_values_of_different_arenas():
    a = bt.Value(1.0, arena=bt.Arena())
    b = bt.Value(1.0, arena=bt.Arena())
    with pytest.raises(ValueError, match="arena"):
        a * b


def test_empty_and_short_var_arity():
    for f in [bt.reduce_sum, bt.reduce_mul, bt.reduce_mean, bt.variance, bt.variance_biased,
              bt.reduce_mean_and_mean_squares]:
        with pytest.raises(ValueError, match="empty|at least"):
            f([])
    with pytest.raises(ValueError, match="at least 2"):
        bt.variance([bt.Value(1.0)])
    with pytest.raises(ValueError, match="length"):
        bt.inner_product([bt.Value(1.0)], [bt.Value(1.0), bt.Value(2.0)])
    with pytest.raises(TypeError):
        bt.reduce_sum(bt.Value(1.0))
    with pytest.raises(TypeError):
        bt.reduce_sum(5)
    with pytest.raises(TypeError, match="item 1"):
        bt.reduce_sum([bt.Value(1.0), "x"])


def test_bad_backward_arguments():
    x = bt.Value(1.0) * 2
    with pytest.raises(ValueError, match="finite"):
        x.backward(math.nan)
    with pytest.raises(TypeError):
        x.backward("1")
    with pytest.raises(TypeError):
        x.backward(wrt=[1.0])
    with pytest.raises(ValueError):
        x.backward(wrt=[])
    with pytest.raises(TypeError):
        x.backward(1.0, None, 3)
    with pytest.raises(TypeError):
        x.backward(sed=1.0)
    with pytest.raises(TypeError):
        bt.backward(3.0)


def test_bad_constructor_and_attributes():
    with pytest.raises(TypeError):
        bt.Value()
    with pytest.raises(TypeError):
        bt.Value(1.0, dtype="int8")
    with pytest.raises(TypeError):
        bt.Value(1.0, label=3)
    with pytest.raises(TypeError):
        bt.Value(bt.Value(1.0))
    with pytest.raises(TypeError):
        bt.Value(1.0, arena="arena")
    x = bt.Value(1.0)
    with pytest.raises(TypeError):
        x.data = "2"
    with pytest.raises(TypeError):
        x.grad = None
    with pytest.raises(AttributeError):
        x.index = 3
    with pytest.raises(TypeError):
        pow(x, 2, 3)
    with pytest.raises(TypeError):
        bt.relu(1.0)
    with pytest.raises(IndexError):
        bt.current_arena().value(10**9)


def test_numbers_of_other_types_work():
    np = pytest.importorskip("numpy")
    x = bt.Value(np.float32(2.0))
    y = x * np.float64(3.0) + np.int64(1) + True
    assert y.data == 8.0
    assert bt.Value(10**3).data == 1000.0
    with pytest.raises(OverflowError):
        bt.Value(10**400)
