"""What the lane tests share: the dtypes they run, bitwise views for exact comparison, and the
lanes switch put back on after every test (a test that turns lanes off must not leak it)."""
import numpy as np
import pytest

import burtorch as bt
from burtorch import _core

DTYPES = [bt.float64, bt.float32]


@pytest.fixture(autouse=True)
def lanes_restored():
    yield
    _core.set_lanes_enabled(True)


def bits(a):
    """The array's bits as unsigned integers: equal bits, not equal values (so -0.0 != 0.0 and a
    NaN equals itself)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint64 if a.dtype == np.float64 else np.uint32)
