import os
import random

import pytest

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture
def rng():
    return random.Random(1234)


def shared_data(name):
    """Path of a file in ../shared/data, or None when the checkout has no shared data beside it."""
    p = os.path.abspath(os.path.join(SHARED_DATA, name))
    return p if os.path.exists(p) else None
