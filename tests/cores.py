"""The cores this process may use, for tests that run work on two threads: the oracle refuses
more threads than that, so on a one-core machine (or under taskset -c 0) those cases skip."""
import pytest

from burtorch import _core

ALLOWED = int(_core._allowed_cores())
needs_two = pytest.mark.skipif(ALLOWED < 2, reason="this process may use one core only")


def counts(*threads: int) -> tuple[int, ...]:
    """Those of the thread counts this process may run."""
    return tuple(t for t in threads if t <= ALLOWED)
