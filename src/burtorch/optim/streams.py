"""Seeds for every random draw of a federated run, derived from (run seed, purpose, client, round).

Each draw's seed is a pure function of those integers, never of a generator's position, so a
client computes the same numbers whichever process or machine runs it, and skipping a client
(partial participation) shifts nobody else's randomness.
"""
from __future__ import annotations

import random

_MASK = (1 << 64) - 1

# Purposes: distinct streams for distinct kinds of draw.
COIN = 1           # the server's per-round coin (MARINA, PAGE)
PARTICIPANTS = 2   # which clients take part in a round
COMPRESS = 3       # a client's compressor in a round
MINIBATCH = 4      # a client's minibatch in a round (and local step)
DATA = 5           # data generation and splits
STANDALONE = 6     # a compressor used on its own, call after call
DOWNLINK = 7       # the server's compressor of a round's broadcast (EF21-BC)


def _mix(z: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit ints that scatters nearby inputs."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def derive(seed: int, *keys: int) -> int:
    """A 64-bit seed for the draw named by ``keys`` (non-negative ints) under ``seed``."""
    h = _mix(seed & _MASK)
    for k in keys:
        h = _mix(h ^ _mix(k & _MASK))
    return h


def rng(seed: int, *keys: int) -> random.Random:
    """A Python generator for the draw named by ``keys``."""
    return random.Random(derive(seed, *keys))
