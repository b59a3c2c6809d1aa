"""One seed for a whole run: ``bt.manual_seed(s)``.

Everything in burtorch that draws random numbers without an explicit ``seed=`` (parameter
initialisation, data samplers, gradient compressors, client sampling in federated runs) takes its
seed from :func:`next_seed`. ``manual_seed(s)`` restarts that stream, so the same program after the
same ``manual_seed`` call draws the same numbers. Passing ``seed=`` explicitly bypasses the stream.
"""
from __future__ import annotations

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15

_state = 0x853C49E6748FEA9B  # the stream a process starts with, before any manual_seed call


def manual_seed(seed: int) -> None:
    """Restarts the stream of default seeds. ``seed`` is any int (negative ones included)."""
    global _state
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"manual_seed() expects an int, got {type(seed).__name__}")
    _state = seed & _MASK


def next_seed() -> int:
    """The next default seed: a 63-bit int from a splitmix64 sequence over the current state."""
    global _state
    _state = (_state + _GOLDEN) & _MASK
    z = _state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return (z ^ (z >> 31)) >> 1
